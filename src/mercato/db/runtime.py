"""What every edge (web, CLI, worker) holds: settings, the database and the clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from mercato.core.clock import Clock, SystemClock
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    db: Database
    clock: Clock = field(default_factory=SystemClock)

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock | None = None) -> Runtime:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = make_engine(settings.resolved_database_url)
        db = Database(engine, concurrency=settings.db_concurrency)
        return cls(settings=settings, db=db, clock=clock or SystemClock())
