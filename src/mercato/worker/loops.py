"""The durable background loops, on an event loop. Each `x_once(runtime) -> int` does one pass.

Work is found in the database and leased (`FOR UPDATE SKIP LOCKED` on PostgreSQL, a
conditional UPDATE on SQLite), so any number of workers can share one database without doing a
job twice; a worker that dies simply lets its leases expire. A worker only ever works the rows
its own claim returned.

A lane works many calls at once (decision 0340): it claims as many due rows as it has free
slots (`MERCATO_WORKER_CONCURRENCY`), starts their steps at once, and claims again each time a
step ends, so a step waiting on a slow or dead provider holds one slot while the others go on.
A row is claimed only when a slot is free for it, so its step starts at once and its lease
(`flows.lease_seconds`, longer than a provider call may take) outlives the step.

Stuck calls (decision 0201) have a lane of their own, with slots of their own: the fresh loops
never claim them, so a pile of stuck calls, each perhaps waiting out a timeout at a dead address,
cannot delay the reconciliation of any other call. Artifact ingestion and refund retries are
sync code and run on a thread (`asyncio.to_thread`), never on the loop; so does the fold of
settled calls' credits into earnings and revenue (decision 0595).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from mercato.artifacts import flows as artifact_flows
from mercato.core.logs import about_invocation
from mercato.db.runtime import Runtime
from mercato.dispatch.observed import AsyncObservedProviderClient
from mercato.dispatch.port import PerLoopProvider
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.schemas import ACTIVE_STATES, State
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.settings import Settings
from mercato.worker import refunds

log = logging.getLogger("mercato.worker")

BATCH = 20
"""The fewest rows one loop works in one pass (`run_once`); a pass takes up to a lane's slots
when it has more."""

Step = Callable[[Runtime, str, str], Awaitable[None]]
"""A worker step: `step(runtime, invocation_id, lease_owner)`, on a row the caller leased."""


def fresh_slots(settings: Settings) -> int:
    """Steps the fresh lane runs at once."""
    return settings.worker_concurrency


def stuck_slots(settings: Settings) -> int:
    """Steps the stuck lane runs at once: a quarter of the fresh lane's, at least one. Stuck
    calls are reconciled at the slowest pace, so they never need many."""
    return max(1, settings.worker_concurrency // 4)


async def _claim_due(
    runtime: Runtime, kind: Claiming, owner: str, limit: int, skip: frozenset[str]
) -> list[tuple[str, str | None, str]]:
    async with runtime.adb.transaction() as conn:
        return await invocations.claim_due.aio(
            conn,
            states=kind.states,
            lease_owner=owner,
            lease_seconds=flows.lease_seconds(runtime),
            now=runtime.clock.now(),
            limit=limit,
            stuck=kind.stuck,
            skip=skip,
        )


async def _unclaim(runtime: Runtime, invocation_ids: list[str], owner: str) -> None:
    async with runtime.adb.transaction() as conn:
        await invocations.unclaim.aio(conn, invocation_ids=invocation_ids, lease_owner=owner)


@dataclass(frozen=True, slots=True)
class Claiming:
    """A loop that leases due rows in `states` (of the stuck lane when `stuck`) and runs
    `step` on each."""

    name: str
    states: tuple[State, ...]
    step: Step
    stuck: bool = False


# (c) Take over calls whose processing lease expired mid-flight: reconcile, never resend.
RECOVER = Claiming("recover", (State.DISPATCHING,), flows.reconcile)
# (b) Ask the provider about unknown outcomes until the answer is definite.
RECONCILE = Claiming("reconcile", (State.RECONCILING,), flows.reconcile)
# (a) Send again what the provider proved it never accepted, once its backoff is due.
REDISPATCH = Claiming("redispatch", (State.RETRY_WAIT,), flows.redispatch)
# (f) Keep reconciling stuck calls at their slowest pace, in their own lane.
STUCK = Claiming("stuck", ACTIVE_STATES, flows.work_stuck, stuck=True)

FRESH_CLAIMING: tuple[Claiming, ...] = (RECOVER, RECONCILE, REDISPATCH)
STUCK_CLAIMING: tuple[Claiming, ...] = (STUCK,)


async def _work(
    runtime: Runtime, kind: Claiming, claimed: tuple[str, str | None, str], owner: str
) -> None:
    invocation_id, request_id, _connection_id = claimed
    # Every line of this step names the call and the request that accepted it (0276); the
    # task has its own copy of the context, so the steps running beside it keep theirs.
    with about_invocation(invocation_id, request_id):
        try:
            await kind.step(runtime, invocation_id, owner)
        except Exception:
            # The lease expires and another pass retries; nothing was half-committed.
            log.exception("invocation %s: step failed", invocation_id)


class Slots:
    """The steps of one lane in flight, at most `size` of them, shared fairly between
    connections (decision 0513): a connection starts a step only while it holds fewer than
    its `share` of the lane, so one hung provider never holds every slot."""

    def __init__(self, runtime: Runtime, size: int) -> None:
        self.runtime = runtime
        self.size = size
        self.running: dict[asyncio.Task[None], str] = {}
        """The steps started and not yet seen done, each with its connection."""

    def share(self, connection_id: str) -> int:
        """The most steps `connection_id` may start up to: alone, the lane but a quarter of it
        (at least one seat) kept for others; beside others holding steps, an equal split. A
        connection over its share starts nothing until it is under it again, so the slots
        its steps give back go to the others (decision 0513)."""
        return self._share(connection_id, self.held)

    def _share(self, connection_id: str, held: dict[str, int]) -> int:
        others = len(held) - (1 if connection_id in held else 0)
        if others == 0:
            return max(1, self.size - max(1, self.size // 4))
        return max(1, self.size // (others + 1))

    def _full(self) -> frozenset[str]:
        held = self.held
        return frozenset(c for c, n in held.items() if n >= self._share(c, held))

    @property
    def held(self) -> dict[str, int]:
        """Steps in flight now per connection. Counted from the tasks themselves, as `busy`
        is: a step that is done is neither busy nor held, even before its done callbacks
        have run (they run a loop turn later)."""
        return dict(Counter(self._live().values()))

    def _live(self) -> dict[asyncio.Task[None], str]:
        self.running = {task: c for task, c in self.running.items() if not task.done()}
        return self.running

    @property
    def busy(self) -> int:
        """Steps in flight now."""
        return len(self._live())

    @property
    def free(self) -> int:
        """Slots free now (never negative, even if a claim ever returned more rows than asked)."""
        return max(0, self.size - self.busy)

    async def fill(self, kind: Claiming, limit: int) -> tuple[int, bool]:
        """Lease up to `limit` due rows of `kind` (never more than the free slots, nor past a
        connection's share) and start their steps; (rows started, whether that was all that
        was due). Rows a claim returned past their connection's share are given back and the
        claim is made again without that connection, so the others' rows are reached now."""
        started = 0
        while True:
            want = min(self.free, limit - started)
            if want <= 0:
                return started, False
            owner = self.runtime.ids.new("lease")
            skip = self._full()
            in_flight = list(self.running)
            claimed = await _claim_due(self.runtime, kind, owner, want, skip)
            over: list[str] = []
            held = self.held
            for row in claimed:
                connection_id = row[2]
                if held.get(connection_id, 0) >= self._share(connection_id, held):
                    over.append(row[0])  # past its share: due again at once
                    continue
                held[connection_id] = held.get(connection_id, 0) + 1
                task = asyncio.create_task(_work(self.runtime, kind, row, owner), name=kind.name)
                self.running[task] = connection_id
            started += len(claimed) - len(over)
            if over:
                await _unclaim(self.runtime, over, owner)  # its connection is full now: skipped
                continue
            if len(claimed) < want and skip and any(task.done() for task in in_flight):
                # A step ended while the claim ran: a connection it skipped as full may have
                # room now, and nothing else would wake the caller for its rows (a caller
                # that waits for "a step to end" would wait for one that has ended already,
                # perhaps behind a hung provider's step alone). Claim again now.
                continue
            # Fewer than asked: all that was due, unless some connections were skipped.
            return started, len(claimed) < want and not skip

    async def wait_one(
        self, also: asyncio.Future[Any] | None = None, timeout: float | None = None
    ) -> None:
        """Until a step in flight ends (or `also` does, or `timeout` seconds pass)."""
        waiting: set[asyncio.Future[Any]] = set(self._live())
        if also is not None:
            waiting.add(also)
        if waiting:
            await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)

    async def finish(self) -> None:
        """Until every step in flight has ended (each is bounded by its own timeouts)."""
        if self.running:
            await asyncio.wait(list(self.running))
        self.running.clear()


def with_async_provider(runtime: Runtime) -> Runtime:
    """`runtime`, carrying the async provider client the flows call: the one its builder gave
    (a test's, the simulation's), else the observed client, one per event loop, closed with
    its loop (`mercato.dispatch.port.PerLoopProvider`), as the serve process has it."""
    if runtime.async_provider is None:
        settings = runtime.settings
        runtime.async_provider = PerLoopProvider(lambda: AsyncObservedProviderClient(settings))
    return runtime


async def drain(runtime: Runtime, kind: Claiming, size: int) -> int:
    """One pass of `kind`: work its due rows, `size` at once, claiming again as each step ends,
    until none is due or the pass has taken `max(BATCH, size)`; return rows worked."""
    with_async_provider(runtime)
    slots = Slots(runtime, size)
    limit = max(BATCH, size)
    taken, exhausted, blocked = 0, False, False
    try:
        while True:
            if not exhausted and not blocked and taken < limit and slots.free > 0:
                started, exhausted = await slots.fill(kind, limit - taken)
                taken += started
                # Nothing startable now (what is due is of connections at their share):
                # claim again once a step has ended.
                blocked = started == 0
                continue
            if not slots.busy:
                return taken
            await slots.wait_one()
            blocked = False
    finally:
        await slots.finish()


async def redispatch_once(runtime: Runtime) -> int:
    """(a) Send again what the provider proved it never accepted, once its backoff is due."""
    return await drain(runtime, REDISPATCH, fresh_slots(runtime.settings))


async def reconcile_once(runtime: Runtime) -> int:
    """(b) Ask the provider about unknown outcomes until the answer is definite."""
    return await drain(runtime, RECONCILE, fresh_slots(runtime.settings))


async def recover_once(runtime: Runtime) -> int:
    """(c) Take over calls whose processing lease expired mid-flight: reconcile, never resend."""
    return await drain(runtime, RECOVER, fresh_slots(runtime.settings))


async def stuck_once(runtime: Runtime) -> int:
    """(f) Keep reconciling stuck calls at their slowest pace, in their own lane."""
    return await drain(runtime, STUCK, stuck_slots(runtime.settings))


def _ingest(runtime: Runtime) -> int:
    return artifact_flows.ingest_once(
        runtime, runtime.provider_client(), resolve_target=providers.get_dispatch_target
    )


async def artifacts_once(runtime: Runtime) -> int:
    """(d) Pull the artifacts of settled calls (sync code, on a thread)."""
    return await asyncio.to_thread(_ingest, runtime)


async def refunds_once(runtime: Runtime) -> int:
    """(e) Retry the refunds of approved disputes that could not post yet (sync, on a thread)."""
    return await asyncio.to_thread(refunds.run_once, runtime)


def _fold(runtime: Runtime) -> int:
    with runtime.db.transaction() as session:
        return ledger.fold(session)


async def folds_once(runtime: Runtime) -> int:
    """(g) Fold settled calls' credits into earnings and revenue (decision 0595; balances read
    exact without it, this keeps the not-yet-folded part short). Sync code, on a thread. It
    folds everything due in one pass and is bookkeeping, not a call's work: it counts 0, so a
    worker with nothing else to do stays idle (and paced)."""
    await asyncio.to_thread(_fold, runtime)
    return 0


Loop = Callable[[Runtime], Coroutine[Any, Any, int]]

LOOPS: tuple[Loop, ...] = (
    recover_once,
    reconcile_once,
    redispatch_once,
    artifacts_once,
    refunds_once,
    folds_once,
)
STUCK_LOOPS: tuple[Loop, ...] = (stuck_once,)


async def run_lane(runtime: Runtime, lane: tuple[Loop, ...]) -> int:
    """One pass of the loops of one lane, in order; returns the work done (0 when idle)."""
    done = 0
    for loop in lane:
        done += await loop(runtime)
    return done


async def run_once(runtime: Runtime) -> int:
    """One pass of every loop, fresh work first; returns the total work done (0 when idle)."""
    return await run_lane(runtime, LOOPS) + await run_lane(runtime, STUCK_LOOPS)
