"""The unit of work: the only place that commits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction, sessionmaker

from mercato.core.ids import SYSTEM_IDS, Ids, bound
from mercato.db.engine import READ_OPTION


class ReadSessionWrote(RuntimeError):
    """A read session was asked to write: a programming error, refused before it reaches SQL."""


class StatementSessionReused(RuntimeError):
    """A one-statement session was asked for a second statement: a programming error, refused
    before it reaches SQL (the first one has committed on its own)."""


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


def _allow_one_statement(state: ORMExecuteState) -> None:
    info = state.session.info
    if info.get(_STATEMENT_RAN):
        raise StatementSessionReused(
            "a one-statement session runs exactly one statement; use Database.transaction()"
        )
    info[_STATEMENT_RAN] = True


_STATEMENT_RAN = "mercato_statement_ran"
_ONE_STATEMENT = "mercato_one_statement"


def one_statement(session: Session) -> None:
    """Note that `session` is about to run one statement on its connection directly (a
    precompiled guarded program, `mercato.db.guarded`): in a one-statement session a second one
    is refused as `session.execute` refuses it."""
    if session.info.get(_ONE_STATEMENT):
        if session.info.get(_STATEMENT_RAN):
            raise StatementSessionReused(
                "a one-statement session runs exactly one statement; use Database.transaction()"
            )
        session.info[_STATEMENT_RAN] = True


def _refusing_flush(
    error: type[RuntimeError], message: str
) -> Callable[[Session, UOWTransaction, Any], None]:
    """A `before_flush` listener that raises `error(message)` when the session has ORM
    changes."""

    def refuse(session: Session, _flush: UOWTransaction, _instances: Any) -> None:
        if session.new or session.dirty or session.deleted:
            raise error(message)

    return refuse


_refuse_flush = _refusing_flush(
    ReadSessionWrote, "a read session never writes; use Database.transaction()"
)
_refuse_statement_flush = _refusing_flush(
    StatementSessionReused, "a one-statement session does not flush ORM objects"
)


class Database:
    """Owns the engine and hands out short transactions.

    `concurrency` (> 0) bounds how many threads of this process work in the database at once
    (decision 0185): a request thread waiting for its provider holds no turn, while threads
    queueing on the same hot rows, and on the interpreter lock between their round trips, only
    slow each other down. A thread that nests a transaction or a read inside its own takes one
    turn, not two.

    `ids` is the Runtime's id source: every unit of work binds it, so the rows it names get
    their ids from it (`mercato.core.ids.new_id`).
    """

    def __init__(self, engine: Engine, *, concurrency: int = 0, ids: Ids | None = None) -> None:
        self.engine = engine
        self.ids: Ids = ids or SYSTEM_IDS
        self._sessions = sessionmaker(engine, expire_on_commit=False, autoflush=True)
        self._readers = sessionmaker(_read_engine(engine), expire_on_commit=False, autoflush=True)
        event.listen(self._readers, "do_orm_execute", _refuse_statement)
        event.listen(self._readers, "before_flush", _refuse_flush)
        self._one_statement: sessionmaker[Session] | None = None
        if engine.dialect.name == "postgresql":
            self._one_statement = sessionmaker(
                engine.execution_options(isolation_level="AUTOCOMMIT"),
                expire_on_commit=False,
                autoflush=False,
            )
            event.listen(self._one_statement, "do_orm_execute", _allow_one_statement)
            event.listen(self._one_statement, "before_flush", _refuse_statement_flush)
        self._dispose_hooks: list[Callable[[], None]] = []
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
            with bound(self.ids):
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
    def statement(self) -> Iterator[Session]:
        """Yield a session for exactly one write statement that is atomic on its own.

        On PostgreSQL the statement runs without BEGIN and COMMIT (autocommit): a money program
        (`mercato.db.guarded`, one data-modifying CTE) is one statement, which PostgreSQL
        commits, or takes back whole when it raises. A second statement is refused
        (`StatementSessionReused`), since it would not be part of the first one's transaction.
        On SQLite this is `transaction()`: the same guarded statements run one after another
        and the session commits them together (decisions 0191, 0240)."""
        if self._one_statement is None:
            with self.transaction() as session:
                yield session
            return
        with self._turn():
            session = self._one_statement()
            session.info[_ONE_STATEMENT] = True
            try:
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
                session.close()  # ends the read's transaction (SQLite) with a rollback

    def on_dispose(self, hook: Callable[[], None]) -> None:
        """Call `hook` when this database is disposed (the async side beside it lets go of
        the connections it no longer can use)."""
        self._dispose_hooks.append(hook)

    def dispose(self) -> None:
        for hook in self._dispose_hooks:
            hook()
        self.engine.dispose()
