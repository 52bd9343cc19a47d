"""The simulated world: a fresh database, callers, a published provider, the app, the seams.

Everything the platform would take from the outside world is replaced by something the seed
controls, and all of it goes in through the Runtime the world builds (db/runtime.py): the clock
(`FakeClock`), the sleeps, sync and async (they advance it), the random jitter and the ids
(seeded), the provider clients (the async one the engine calls, `SimProviderClient`, and the sync
one over the simulated provider's httpx transport), the failpoints (they raise `SimulatedCrash`
instead of killing the process, or plan an interleaving) and the async database (the real one,
which first runs an interleaving planned at a failpoint, on the loop, before the next unit of
work opens). No module attribute of the platform is swapped for them. Nothing here changes what
the platform does.

The app is driven in-process on the run's one event loop: an `httpx.AsyncClient` over
`httpx.ASGITransport`, with the app's lifespan entered around the run.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from mercato.accounts import service as accounts
from mercato.catalog import service as catalog
from mercato.catalog.schemas import ConnectionFacts
from mercato.core.clock import FakeClock
from mercato.core.ids import format_id
from mercato.db.aio import Writes
from mercato.db.plans import AsyncConnection, AsyncDatabase
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.providers.schemas import CheckVerdict
from mercato.quotas import service as quotas
from mercato.settings import Settings
from mercato.web.app import create_app
from support.simulation.client import SimProviderClient
from support.simulation.provider import RESPONSE_MAX_BYTES, SimProvider
from support.simulation.trace import Recorder

SERVICE = "sim.echo"
CREDENTIAL = "simulated-connection-credential-0123456789"
START = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
CONTRACT: dict[str, Any] = {
    "adapterRef": "vetted.http-json/v1",
    "installationConfigSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    "presentationContractRef": "",
    "presentationContractDigest": "",
    "providerOutcomes": [
        "SUCCEEDED",
        "DEFINED_FAILURE",
        "RETRYABLE_BEFORE_ACCEPT",
        "UNKNOWN_OUTCOME",
    ],
    "requestMaxBytes": 512,
    "requestSchema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    },
    "requestShape": {"n": "integer"},
    "responseMaxBytes": RESPONSE_MAX_BYTES,
    "resultSchema": {"type": "object", "required": ["echo"]},
}
VERSIONS: tuple[tuple[str, int, int], ...] = (("v1", 10, 7000), ("v2", 7, 3333))
"""(label, price, provider share in basis points): two prices, one with a rounding remainder."""

# (points granted, quota limit, quota window seconds); None = the default policy.
CALLERS: tuple[tuple[int, tuple[int, int] | None], ...] = (
    (400, (4, 60)),
    (300, (6, 30)),
    (600, None),
    (40, (2, 10)),
)


class SimulatedCrash(Exception):
    """The platform process 'died' at a fail-point: nothing after it in that process runs."""


@dataclass
class Caller:
    name: str
    account_id: str
    api_key: str
    granted: int


@dataclass
class World:
    runtime: Runtime
    clock: FakeClock
    app: FastAPI
    http: httpx.AsyncClient
    provider: SimProvider
    provider_client: ProviderClient
    provider_account_id: str
    callers: list[Caller]
    issued: int
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def __aenter__(self) -> World:
        """Start the app (its lifespan) on the running loop."""
        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stack.aclose()
            await self.http.aclose()
            await self.runtime.adb.close()
        finally:
            self.provider_client.close()
            self.runtime.db.dispose()


def build_world(
    database_url: str,
    data_dir: Path,
    clock: FakeClock,
    recorder: Recorder,
    rng: random.Random,
    *,
    failpoints: Crasher,
    seed: int,
) -> World:
    """Build the Runtime from the seed's parts, then set up callers, a provider account, an
    approved connection and two published versions."""
    settings = Settings(
        env="dev",
        data_dir=data_dir,
        database_url=database_url,
        provider_timeout_seconds=1.0,
        redispatch_attempts=3,
        idempotency_lease_seconds=30,
        default_quota_limit=60,
        default_quota_window_seconds=60,
        # One worker step at a time: the worker's own concurrency would interleave its steps
        # by the database driver's timing, not by the seed (decision 0351).
        worker_concurrency=1,
    )
    provider = SimProvider(rng=rng, recorder=recorder, max_sends=1 + settings.redispatch_attempts)
    client = ProviderClient(settings, transport=provider.transport())
    runtime = Runtime.from_settings(
        settings,
        clock=clock,
        sleep=clock.advance,
        rng=random.Random(seed * 7919 + 1),
        ids=SeededIds(clock, random.Random(seed * 104729 + 2)),
        failpoints=failpoints,
        provider=client,
    )
    runtime.aio = runtime.adb = InterleavingDatabase(runtime.adb, failpoints)
    runtime.asleep = FakeSleep(clock)
    runtime.async_provider = SimProviderClient(provider)
    now = clock.now()
    callers: list[Caller] = []
    with runtime.db.transaction() as session:
        owner = accounts.create_account(
            session, email="provider@sim.example", password=None, is_staff=False, now=now
        )
        connection = providers.create_connection(
            session,
            owner_id=owner.id,
            name="sim-echo",
            base_url="http://127.0.0.1:9",
            credential=CREDENTIAL,
            settings=settings,
            now=now,
        )
        checks = [CheckVerdict(i, f"check-{i}", "passed", {}) for i in range(1, 10)]
        providers.record_run(
            session,
            connection_id=connection.id,
            connection_revision=connection.revision,
            started_at=now,
            finished_at=now,
            checks=checks,
        )
        providers.approve_connection(session, connection_id=connection.id, now=now)
        facts = ConnectionFacts(connection_id=connection.id, owner_id=owner.id, approved=True)
        for label, price, share in VERSIONS:
            catalog.publish(
                session,
                service_code=SERVICE,
                display_name="Simulated echo",
                version=label,
                connection=facts,
                price=price,
                contract=CONTRACT,
                description="The fault simulation's service.",
                provider_share_bps=share,
                now=now,
            )
        for index, (points, quota) in enumerate(CALLERS):
            account = accounts.create_account(
                session, email=f"caller{index}@sim.example", password=None, is_staff=False, now=now
            )
            key = accounts.create_api_key(session, account_id=account.id, name="sim", now=now)
            ledger.grant(session, account_id=account.id, amount=points, now=now, memo="sim")
            if quota is not None:
                quotas.set_quota(
                    session,
                    account_id=account.id,
                    policy=f"sim-{index}",
                    limit=quota[0],
                    window_seconds=quota[1],
                    now=now,
                )
            callers.append(Caller(f"c{index}", account.id, key.api_key, points))
        provider_account_id = owner.id
    app = create_app(runtime)
    asgi = httpx.ASGITransport(app=app, raise_app_exceptions=True)
    http = httpx.AsyncClient(transport=asgi, base_url="http://testserver")
    issued = sum(c.granted for c in callers)
    return World(runtime, clock, app, http, provider, client, provider_account_id, callers, issued)


# --- the seams the seed controls ----------------------------------------------------------


class SeededIds:
    """Ids from the fake clock (strictly increasing milliseconds) and seeded random bits."""

    def __init__(self, clock: FakeClock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng
        self._last = 0

    def new(self, prefix: str) -> str:
        self._last = max(int(self._clock.now().timestamp() * 1000), self._last + 1)
        return format_id(prefix, self._last, self._rng.getrandbits(80))


@dataclass
class Patcher:
    """Set attributes for the length of a run and put every original back afterwards."""

    saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def set(self, target: Any, name: str, value: Any) -> None:
        self.saved.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self.saved:
            target, name, value = self.saved.pop()
            setattr(target, name, value)


class FakeSleep:
    """`runtime.asleep`: sleeping advances the fake clock at once."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    async def __call__(self, seconds: float) -> None:
        self._clock.advance(seconds)


Interleaving = Callable[[], Awaitable[None]]


@dataclass
class Crasher:
    """The simulation's failpoints: the next `hit` of an armed point raises SimulatedCrash; an
    interleaving planned at a point runs (once) when the platform reaches it.

    A failpoint is announced synchronously, so it cannot await the interleaving (concurrent
    requests on the loop): `hit` makes it due, and `InterleavingDatabase` awaits it before the
    platform's next unit of work opens. After `before-accept` that is the accept transaction,
    so the interleaving runs exactly where the point says: checks done, nothing accepted."""

    recorder: Recorder
    armed: set[str] = field(default_factory=set)
    interleave: dict[str, Interleaving] = field(default_factory=dict)
    due: list[Interleaving] = field(default_factory=list)

    def hit(self, point: str) -> None:
        planned = self.interleave.pop(point, None)
        if planned is not None:
            self.due.append(planned)
        if point in self.armed:
            self.armed.discard(point)
            self.recorder.note(f"crash: platform process killed at {point}")
            raise SimulatedCrash(point)

    async def run_due(self) -> None:
        while self.due:
            await self.due.pop(0)()


class InterleavingDatabase(Writes):
    """The Runtime's async database: the real one, after any interleaving that is due (its
    `write` takes its units from here)."""

    def __init__(self, inner: AsyncDatabase, crasher: Crasher) -> None:
        self._inner = inner
        self._crasher = crasher
        self.dialect = inner.dialect
        assert isinstance(inner, Writes)
        self._sync = inner._sync
        self.retry_sleep, self.retry_random = inner.retry_sleep, inner.retry_random

    def read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._after_due(self._inner.read)

    def transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._after_due(self._inner.transaction)

    def statement(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._after_due(self._inner.statement)

    async def close(self) -> None:
        await self._inner.close()

    @asynccontextmanager
    async def _after_due(
        self, unit: Callable[[], AbstractAsyncContextManager[AsyncConnection]]
    ) -> AsyncIterator[AsyncConnection]:
        await self._crasher.run_due()
        async with unit() as conn:
            yield conn


class _Captured(logging.Handler):
    """Collect exceptions the platform logged (worker steps, unexpected web errors)."""

    def __init__(self, sink: Callable[[BaseException], None]) -> None:
        super().__init__(logging.ERROR)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self._sink(record.exc_info[1])


@contextmanager
def logged_errors(on_logged_error: Callable[[BaseException], None]) -> Iterator[None]:
    """Send the exceptions the platform logs to `on_logged_error` for the length of a run."""
    handler = _Captured(on_logged_error)
    loggers = [logging.getLogger(name) for name in ("mercato.worker", "mercato.web")]
    saved = [(lg, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
    try:
        yield
    finally:
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
