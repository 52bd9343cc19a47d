"""The unit of work: the only place that commits."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction, sessionmaker

from mercato.db.engine import READ_OPTION


class ReadSessionWrote(RuntimeError):
    """A read session was asked to write: a programming error, refused before it reaches SQL."""


def _read_engine(engine: Engine) -> Engine:
    """The engine read sessions use, sharing the pool.

    PostgreSQL: autocommit. Under READ COMMITTED every statement takes its own snapshot inside a
    transaction too, so a read sees exactly what it did before, without the BEGIN and ROLLBACK
    round trips. SQLite: a DEFERRED transaction (one snapshot), so readers do not queue for the
    writer lock that every write transaction takes at BEGIN IMMEDIATE (decision 0187).
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT", **{READ_OPTION: True})
    return engine.execution_options(**{READ_OPTION: True})


def _refuse_statement(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        raise ReadSessionWrote("a read session never writes; use Database.transaction()")


def _refuse_flush(session: Session, _flush: UOWTransaction, _instances: Any) -> None:
    if session.new or session.dirty or session.deleted:
        raise ReadSessionWrote("a read session never writes; use Database.transaction()")


class Database:
    """Owns the engine and hands out short transactions.

    `concurrency` (> 0) bounds how many threads of this process work in the database at once
    (decision 0185): a request thread waiting for its provider holds no turn, while threads
    queueing on the same hot rows, and on the interpreter lock between their round trips, only
    slow each other down. A thread that nests a transaction or a read inside its own takes one
    turn, not two.
    """

    def __init__(self, engine: Engine, *, concurrency: int = 0) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False, autoflush=True)
        self._readers = sessionmaker(_read_engine(engine), expire_on_commit=False, autoflush=True)
        event.listen(self._readers, "do_orm_execute", _refuse_statement)
        event.listen(self._readers, "before_flush", _refuse_flush)
        self._gate = threading.BoundedSemaphore(concurrency) if concurrency > 0 else None
        self._depth = threading.local()
        self._counts = threading.Lock()
        self._in_use = 0
        self._waiting = 0

    def turns(self) -> tuple[int, int]:
        """(threads working in the database now, threads waiting for a turn)."""
        with self._counts:
            return self._in_use, self._waiting

    @contextmanager
    def _turn(self) -> Iterator[None]:
        depth: int = getattr(self._depth, "value", 0)
        if depth == 0:
            self._enter()
        self._depth.value = depth + 1
        try:
            yield
        finally:
            self._depth.value = depth
            if depth == 0:
                self._leave()

    def _enter(self) -> None:
        with self._counts:
            self._waiting += 1
        if self._gate is not None:
            self._gate.acquire()  # no timeout; the counters only describe, they do not gate
        with self._counts:
            self._waiting -= 1
            self._in_use += 1

    def _leave(self) -> None:
        with self._counts:
            self._in_use -= 1
        if self._gate is not None:
            self._gate.release()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """Yield a session inside one transaction; commit on success, roll back on error."""
        with self._turn():
            session = self._sessions()
            try:
                with session.begin():
                    yield session
            finally:
                session.close()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """Yield a session for reads; it never commits anything, and refuses to write.

        On PostgreSQL it runs without a transaction (each statement its own snapshot, as under
        READ COMMITTED anyway); on SQLite in one DEFERRED transaction (decision 0187)."""
        with self._turn():
            session = self._readers()
            try:
                yield session
            finally:
                session.rollback()
                session.close()

    def dispose(self) -> None:
        self.engine.dispose()
