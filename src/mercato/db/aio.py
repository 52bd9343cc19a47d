"""The async database: the invoke path's and the worker's units of work (`plans.AsyncDatabase`).

`make_async_database(db)` builds the one a Runtime carries, beside its sync `Database` (same
URL, same ids). Interim implementation: `SessionBacked` runs each unit of work on the sync
`Database`'s sessions, on the calling thread (correct, but it blocks the event loop for every
round trip); the driver-level implementations (asyncpg for PostgreSQL, SQLite on the loop)
replace it behind the same interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.orm import Session

from mercato.db.plans import AsyncConnection, AsyncDatabase, Op, execute_sync
from mercato.db.uow import Database


class _SessionConnection:
    def __init__(self, session: Session) -> None:
        self._session = session

    async def execute(self, op: Op) -> Any:
        return execute_sync(self._session, op)


class SessionBacked:
    """An `AsyncDatabase` over a sync `Database` (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect: str = db.engine.dialect.name

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        with self._db.read() as session:
            yield _SessionConnection(session)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        with self._db.transaction() as session:
            yield _SessionConnection(session)

    @asynccontextmanager
    async def statement(self) -> AsyncIterator[AsyncConnection]:
        with self._db.statement() as session:
            yield _SessionConnection(session)

    async def close(self) -> None:
        return None


def make_async_database(db: Database) -> AsyncDatabase:
    """The async database beside `db` (same store, same ids)."""
    return SessionBacked(db)
