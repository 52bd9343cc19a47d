"""The Runtime: what every edge (web, worker, CLI) builds once at start and hands down.

It carries the settings, the database (engine and units of work), the clock, sleeping,
randomness (backoff jitter), ids, failpoints and the provider client. Production builds it with
`Runtime.from_settings(settings)` and the real parts; a test or the simulation passes its own
(a fake clock whose sleep advances it, a seeded random and ids, failpoints that crash). Nothing
below the edges reads the environment or swaps a module attribute to change one of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING

from mercato.core.bulkhead import Bulkhead
from mercato.core.clock import Clock, SystemClock
from mercato.core.failpoints import NO_FAILPOINTS, Failpoints
from mercato.core.files import ensure_private_dir
from mercato.core.ids import Ids
from mercato.db.aio import make_async_database
from mercato.db.engine import make_engine
from mercato.db.hints import Hints
from mercato.db.plans import AsyncDatabase
from mercato.db.uow import Database
from mercato.settings import Settings

if TYPE_CHECKING:  # the client is built by the edges, above this layer
    from mercato.dispatch.client import ProviderClient
    from mercato.dispatch.port import AsyncProvider

Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


class NoProviderClient(RuntimeError):
    """This Runtime was built without a provider client (a programming error at an edge)."""


@dataclass
class Runtime:
    settings: Settings
    db: Database
    clock: Clock = field(default_factory=SystemClock)
    sleep: Sleep = time.sleep
    random: Random = field(default_factory=Random)
    failpoints: Failpoints = NO_FAILPOINTS
    provider: ProviderClient | None = None
    aio: AsyncDatabase | None = None
    """The async units of work beside `db` when given; made from `db` otherwise (read
    `adb`)."""
    asleep: AsyncSleep = asyncio.sleep
    """Sleeping on the event loop (a test's fake clock advances instead)."""
    async_provider: AsyncProvider | None = None
    """The provider client of the async flows (`mercato.dispatch.port.AsyncProvider`)."""
    hints: Hints | None = field(default_factory=Hints.empty)
    """What the hot invoke keeps in memory in this process (`mercato.db.hints`, decisions
    0400, 0570); None: it reads everything on every call."""

    bulkhead: Bulkhead | None = None
    """Provider calls in flight in this process, per connection and in all (DESIGN §7,
    decision 0510), when given; made from the settings otherwise (read `slots`)."""

    # Set once at construction, plain attributes: the invoke path reads them on every call.
    adb: AsyncDatabase = field(init=False)
    """The async database (the invoke path, the worker)."""
    slots: Bulkhead = field(init=False)
    """The process's bulkhead."""
    armed: Failpoints | None = field(init=False)
    """`failpoints` when a test armed some; None for `NO_FAILPOINTS`, whose points the flows
    then skip rather than call."""

    def __post_init__(self) -> None:
        if self.aio is None:
            self.aio = make_async_database(self.db, sleep=self.asleep, random=self.random)
        if self.bulkhead is None:
            self.bulkhead = Bulkhead(
                per_connection=self.settings.provider_max_in_flight,
                process=self.settings.max_in_flight,
            )
        self.adb = self.aio
        self.slots = self.bulkhead
        self.armed = None if self.failpoints is NO_FAILPOINTS else self.failpoints

    @property
    def ids(self) -> Ids:
        """The id source: the database's (`db.ids`, which it binds inside every unit of work
        for `new_id`; the invoke path reads `db.ids` itself)."""
        return self.db.ids

    def provider_client(self) -> ProviderClient:
        """The process's one pooled provider client."""
        if self.provider is None:
            raise NoProviderClient("this Runtime was built without a provider client")
        return self.provider

    def async_provider_client(self) -> AsyncProvider:
        """The process's one pooled async provider client."""
        if self.async_provider is None:
            raise NoProviderClient("this Runtime was built without an async provider client")
        return self.async_provider

    def ensure_provider(self, make: Callable[[Settings], ProviderClient]) -> Runtime:
        """Give this runtime `make(settings)` as its provider client unless it has one; return
        it (the same object: whoever holds it sees the client, and its other parts stay shared)."""
        if self.provider is None:
            self.provider = make(self.settings)
        return self

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        rng: Random | None = None,
        ids: Ids | None = None,
        failpoints: Failpoints | None = None,
        provider: ProviderClient | None = None,
    ) -> Runtime:
        """Open the database of `settings`; every part not given is the production one."""
        ensure_private_dir(settings.data_dir)
        engine = make_engine(settings.resolved_database_url)
        db = Database(engine, concurrency=settings.db_concurrency, ids=ids)
        return cls(
            settings=settings,
            db=db,
            clock=clock or SystemClock(),
            sleep=sleep or time.sleep,
            random=rng or Random(),
            failpoints=failpoints or NO_FAILPOINTS,
            provider=provider,
        )
