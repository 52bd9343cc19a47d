"""The durable background loops. Each `run_once(runtime, client) -> int` does one pass.

Work is found in the database and leased row by row (`FOR UPDATE SKIP LOCKED` on PostgreSQL,
a conditional UPDATE on SQLite), so any number of workers can share one database without
doing a job twice; a worker that dies simply lets its leases expire.

Stuck calls (decision 0201) have a lane of their own: the fresh loops never claim them, so a
pile of stuck calls, each perhaps waiting out a timeout at a dead address, cannot delay the
reconciliation of any other call. `run_forever` runs the two lanes in separate threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from mercato.artifacts import flows as artifact_flows
from mercato.core.logs import about_invocation
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.dispatch.observed import AsyncObservedProviderClient
from mercato.dispatch.port import PerLoopProvider
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.schemas import ACTIVE_STATES, State
from mercato.providers import service as providers
from mercato.worker import refunds

log = logging.getLogger("mercato.worker")

BATCH = 20

Step = Callable[[Runtime, str, str], Awaitable[None]]


# --- TEMPORARY ADAPTER (h2): the flows are async; this sync worker runs each step on an event
# loop of its own, with an async provider client made on that loop and closed with it. h3's
# async worker replaces this whole module; remove the adapter then.
def _run_step(runtime: Runtime, step: Step, invocation_id: str, owner: str) -> None:
    if runtime.async_provider is None:
        settings = runtime.settings
        runtime.async_provider = PerLoopProvider(lambda: AsyncObservedProviderClient(settings))
    provider = runtime.async_provider

    async def one_step() -> None:
        try:
            await step(runtime, invocation_id, owner)
        finally:
            if isinstance(provider, PerLoopProvider):
                await provider.aclose()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(one_step())
        return
    outcome: dict[str, Any] = {}  # this thread carries a loop already: use a fresh thread

    def target() -> None:
        try:
            asyncio.run(one_step())
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="worker-step")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]


def _drain(
    runtime: Runtime,
    client: ProviderClient,
    states: tuple[State, ...],
    step: Step,
    *,
    stuck: bool = False,
) -> int:
    """Lease due rows in `states` (of one lane) one at a time and run `step` on each; return
    rows handled."""
    done = 0
    for _ in range(BATCH):
        owner = runtime.ids.new("lease")
        with runtime.db.transaction() as session:
            claimed = invocations.claim_due(
                session,
                states=states,
                lease_owner=owner,
                lease_seconds=flows.lease_seconds(runtime),
                now=runtime.clock.now(),
                limit=1,
                stuck=stuck,
            )
        if not claimed:
            break
        invocation_id, request_id = claimed[0]
        # Every line of this step names the call and the request that accepted it (0276).
        with about_invocation(invocation_id, request_id):
            try:
                _run_step(runtime, step, invocation_id, owner)
            except Exception:
                # The lease expires and another pass retries; nothing was half-committed.
                log.exception("invocation %s: step failed", invocation_id)
        done += 1
    return done


def redispatch_once(runtime: Runtime, client: ProviderClient) -> int:
    """(a) Send again what the provider proved it never accepted, once its backoff is due."""
    return _drain(runtime, client, (State.RETRY_WAIT,), flows.redispatch)


def reconcile_once(runtime: Runtime, client: ProviderClient) -> int:
    """(b) Ask the provider about unknown outcomes until the answer is definite."""
    return _drain(runtime, client, (State.RECONCILING,), flows.reconcile)


def recover_once(runtime: Runtime, client: ProviderClient) -> int:
    """(c) Take over calls whose processing lease expired mid-flight: reconcile, never resend."""
    return _drain(runtime, client, (State.DISPATCHING,), flows.reconcile)


def stuck_once(runtime: Runtime, client: ProviderClient) -> int:
    """(f) Keep reconciling stuck calls at their slowest pace, in their own lane."""
    return _drain(runtime, client, ACTIVE_STATES, flows.work_stuck, stuck=True)


def artifacts_once(runtime: Runtime, client: ProviderClient) -> int:
    """(d) Pull the artifacts of settled calls."""
    return artifact_flows.ingest_once(runtime, client, resolve_target=providers.get_dispatch_target)


def refunds_once(runtime: Runtime, _client: ProviderClient) -> int:
    """(e) Retry the refunds of approved disputes that could not post yet."""
    return refunds.run_once(runtime)


Loop = Callable[[Runtime, ProviderClient], int]

LOOPS: tuple[Loop, ...] = (
    recover_once,
    reconcile_once,
    redispatch_once,
    artifacts_once,
    refunds_once,
)
STUCK_LOOPS: tuple[Loop, ...] = (stuck_once,)


def run_lane(runtime: Runtime, client: ProviderClient, lane: tuple[Loop, ...]) -> int:
    """One pass of the loops of one lane; returns the work done (0 when idle)."""
    return sum(loop(runtime, client) for loop in lane)


def run_once(runtime: Runtime, client: ProviderClient) -> int:
    """One pass of every loop, fresh work first; returns the total work done (0 when idle)."""
    return run_lane(runtime, client, LOOPS) + run_lane(runtime, client, STUCK_LOOPS)
