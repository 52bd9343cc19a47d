"""The Runtime: what every edge (web, worker, CLI) builds once at start and hands down.

It carries the settings, the database (engine and units of work), the clock, sleeping,
randomness (backoff jitter), ids, failpoints and the provider client. Production builds it with
`Runtime.from_settings(settings)` and the real parts; a test or the simulation passes its own
(a fake clock whose sleep advances it, a seeded random and ids, failpoints that crash). Nothing
below the edges reads the environment or swaps a module attribute to change one of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING

from mercato.core.clock import Clock, SystemClock
from mercato.core.failpoints import NO_FAILPOINTS, Failpoints
from mercato.core.ids import Ids
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.settings import Settings

if TYPE_CHECKING:  # the client is built by the edges, above this layer
    from mercato.dispatch.client import ProviderClient

Sleep = Callable[[float], None]


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

    @property
    def ids(self) -> Ids:
        """The id source; the database binds it inside every unit of work (`new_id`)."""
        return self.db.ids

    def provider_client(self) -> ProviderClient:
        """The process's one pooled provider client."""
        if self.provider is None:
            raise NoProviderClient("this Runtime was built without a provider client")
        return self.provider

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
        settings.data_dir.mkdir(parents=True, exist_ok=True)
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
