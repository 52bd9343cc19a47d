"""The async database: the invoke path's and the worker's units of work (`plans.AsyncDatabase`).

`make_async_database(db)` builds the one a Runtime carries, beside its sync `Database`: the same
store (`db.engine.url`) and the same ids (every unit of work binds `db.ids`, as
`Database._turn` does). The driver follows the URL:

- PostgreSQL: asyncpg, bare (`mercato.db.aio_postgres`);
- SQLite: sqlite3 on the event loop, the write lock polled without blocking the loop
  (`mercato.db.aio_sqlite`).

Both execute the SQLAlchemy Core statements of the plans compiled once for the driver
(`mercato.db.aio_statements`), bind and read values through the statements' types exactly as a
Session does, and raise the driver's errors as SQLAlchemy's (`IntegrityError`,
`OperationalError`, … with the driver's exception as `.orig`), so a plan and its callers see
the same values and the same exceptions on either side (decisions 0320-0323).

`write(plan)` (`Writes`, both stores) picks the unit of a write from its plan (alone when its
first operation is a `Run` marked `last`, else a transaction) and runs it again after a
PostgreSQL deadlock or serialization failure. Money programs are run by `mercato.db.runner`;
the executors only send its statements.

The three units of work keep `Database`'s rules: `read()` never writes (a write statement is
refused with `uow.ReadSessionWrote` before it reaches SQL), `transaction()` commits on success
and rolls back on an exception, `statement()` runs exactly one operation (a second one raises
`uow.StatementSessionReused`; on PostgreSQL it runs in autocommit). A refused (or failed) money
program aborts its unit on both stores: the unit rolls back at its end even when the plan
caught the refusal, and a further operation in it raises `TransactionRefused`
(PostgreSQL aborts the transaction anyway; on SQLite the program's earlier steps would
otherwise commit; decision 0324).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from contextvars import Token
from random import Random
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy.exc import OperationalError

from mercato.core.ids import Ids, bind, unbind
from mercato.db.plans import AsyncConnection, AsyncDatabase, Op, Plan, Run, run_async
from mercato.db.uow import Database, ReadSessionWrote, StatementSessionReused

if TYPE_CHECKING:
    from mercato.db.aio_postgres import PostgresDatabase
    from mercato.db.aio_sqlite import SqliteDatabase

T = TypeVar("T")


class Unit(enum.Enum):
    """The kind of a unit of work."""

    READ = "read"
    TRANSACTION = "transaction"
    STATEMENT = "statement"


class TransactionRefused(RuntimeError):
    """An operation was asked of a unit of work after a money program in it was refused: a
    programming error (the refusal aborted the unit, which rolls back at its end)."""


class OneUnit:
    """The rules every async connection checks before an operation reaches SQL."""

    __slots__ = ("ran", "refused", "unit")

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        self.ran = False
        self.refused = False
        """A money program was refused in this unit: it rolls back at its end, whatever the
        plan did with the refusal (decision 0324)."""

    def check(self, op: Op) -> None:
        if self.refused:
            raise TransactionRefused(
                "a refused money program aborted this unit of work; end it and begin another"
            )
        unit = self.unit
        if unit is Unit.TRANSACTION:
            return
        if unit is Unit.READ:
            if isinstance(op, Run) or getattr(op.statement, "is_dml", False):
                raise ReadSessionWrote("a read session never writes; use transaction()")
            return
        if self.ran:
            raise StatementSessionReused(
                "a one-statement session runs exactly one statement; use transaction()"
            )
        self.ran = True


Listener = Callable[[str, str], None]
"""Told `("unit", "read" | "transaction" | "statement")` when a unit of work begins and
`("sql", text)` for every statement sent (on PostgreSQL BEGIN, COMMIT and ROLLBACK too)."""


class Observed:
    """The listeners of an async database (tests count round trips and units with them; none
    in production, where telling costs one truth test per statement)."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []

    def tell(self, kind: str, detail: str) -> None:
        for listener in list(self.listeners):
            listener(kind, detail)


@contextmanager
def observing(adb: AsyncDatabase, listener: Listener) -> Iterator[None]:
    """Tell `listener` what `adb` (made by `make_async_database`) sends while the block runs."""
    observed: Observed = adb.observed  # type: ignore[attr-defined]
    observed.listeners.append(listener)
    try:
        yield
    finally:
        observed.listeners.remove(listener)


WRITE_ATTEMPTS = 5
RETRY_SQLSTATES = frozenset({"40P01", "40001"})
"""A deadlock, a serialization failure: PostgreSQL rolled the unit back whole."""


class Writes:
    """`AsyncDatabase.write`, the same on both stores (see `plans.AsyncDatabase.write`)."""

    _sync: Database
    retry_sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)
    """Sleeping between two attempts (a test's fake clock advances instead)."""
    retry_random: Random = Random()
    """The jitter of that sleep (a test's seeded random)."""

    def statement(self) -> AbstractAsyncContextManager[AsyncConnection]:
        raise NotImplementedError

    def transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        raise NotImplementedError

    async def write(self, plan: Callable[[], Plan[T]]) -> T:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            made = plan()
            # The plan runs up to its first operation before its unit begins (which unit it
            # takes depends on that operation), with the ids its unit binds.
            token = bind(self._sync.ids)
            try:
                op = next(made)
            except StopIteration as stop:
                value: T = stop.value
                return value
            finally:
                unbind(token)
            alone = type(op) is Run and op.last
            try:
                async with self.statement() if alone else self.transaction() as conn:
                    return await run_async(conn, made, op)
            except OperationalError as error:
                state = getattr(error.orig, "sqlstate", None)
                if state not in RETRY_SQLSTATES or attempt == WRITE_ATTEMPTS:
                    raise
            await self.retry_sleep(self.retry_random.random() * 0.05 * attempt)
        raise AssertionError("unreachable")


def make_async_database(
    db: Database,
    *,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    random: Random | None = None,
) -> AsyncDatabase:
    """The async database beside `db` (same store, same ids); `sleep` and `random` pace its
    writes' retries."""
    adb: PostgresDatabase | SqliteDatabase
    if db.engine.dialect.name == "postgresql":
        from mercato.db.aio_postgres import PostgresDatabase

        adb = PostgresDatabase(db)
    else:
        from mercato.db.aio_sqlite import SqliteDatabase

        adb = SqliteDatabase(db)
    if sleep is not None:
        adb.retry_sleep = sleep
    if random is not None:
        adb.retry_random = random
    # `db.dispose()` (a test's teardown, the CLI's exit) also lets go of the async side's
    # connections that no running loop can still use.
    db.on_dispose(adb.dispose_ended)
    return adb


class Waiting(Protocol):
    """Work queued for a task of the loop (a grouped program or read); its caller awaits
    `future`."""

    future: asyncio.Future[Any]


def fail_waiting(items: Iterable[Waiting], error: BaseException) -> None:
    """Give every item whose caller still waits `error` (a cancellation cancels its future)."""
    for item in items:
        if item.future.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            item.future.cancel()
        else:
            item.future.set_exception(error)


def begin_unit(observed: Observed, ids: Ids, unit: Unit) -> Token[Ids]:
    """Bind `ids` for a unit of work (the rows it names take their ids from them) and tell the
    listeners it began; when a listener refuses it, unbind first: the unit never began, so no
    `__aexit__` will end it. End the unit with `unbind`."""
    token = bind(ids)
    if observed.listeners:
        try:
            observed.tell("unit", unit.value)
        except BaseException:
            unbind(token)
            raise
    return token
