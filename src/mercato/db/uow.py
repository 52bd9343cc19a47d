"""The unit of work: the only place that commits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker


class Database:
    """Owns the engine and hands out short transactions."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False, autoflush=True)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """Yield a session inside one transaction; commit on success, roll back on error."""
        session = self._sessions()
        try:
            with session.begin():
                yield session
        finally:
            session.close()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """Yield a session for reads; it never commits anything."""
        session = self._sessions()
        try:
            yield session
        finally:
            session.rollback()
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()
