"""The async database on PostgreSQL: the bare asyncpg driver (decisions 0320, 0323).

Statements are compiled once for SQLAlchemy's `postgresql+asyncpg` dialect (`$n` placeholders
with their casts) and executed as text on asyncpg connections, whose own prepared-statement
cache then parses each text once per connection. A guarded money program (`Run`) is its one
statement (`guarded.compiled(program, "postgresql").statement`): one round trip; a refusal
aborts it with SQLSTATE 22P02 and comes back as `guarded.Refused`.

Units of work: `read()` runs in autocommit (no BEGIN: one round trip per statement);
`transaction()` sends BEGIN, then COMMIT or ROLLBACK; `statement()` hands its money program to
the loop's group commit (`_Group`, decision 0370): alone it runs in autocommit, one round trip;
several waiting together commit in one transaction, one WAL flush.

Connections: one small pool per event loop (asyncpg connections belong to the loop that opened
them, and a Runtime is used from several loops over its life in tests), made lazily inside the
running loop. The pool is this module's own, not asyncpg's: a connection goes back without a
reset query (the path sets no session state, and a unit that fails mid-transaction rolls back
or discards its connection), and one idle for longer than `engine.IDLE_PING_SECONDS` is pinged
before use and replaced when dead (decision 0183's rule on the sync engine).
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn, TypeVar

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import DBAPIError

from mercato.core.ids import bind, bound, unbind
from mercato.db import guarded
from mercato.db.aio import Observed, OneUnit, Unit, program_values
from mercato.db.aio_statements import Prepared, Statements, sqlalchemy_error
from mercato.db.engine import IDLE_PING_SECONDS
from mercato.db.hints import Served
from mercato.db.plans import AsyncConnection, Op, Run
from mercato.db.uow import Database

_INVALID_TEXT = "22P02"
T = TypeVar("T")
PING_TIMEOUT = 5.0
"""Seconds an idle connection has to answer its ping before it is replaced."""


def asyncpg_dialect() -> PGDialect_asyncpg:
    """SQLAlchemy's dialect for asyncpg, used to compile only (it never connects)."""
    return PGDialect_asyncpg(dbapi=PGDialect_asyncpg.import_dbapi())  # type: ignore[no-untyped-call]


async def _init_connection(conn: Any) -> None:
    # The dialect's JSON types serialise on the way in and leave parsing to the driver, as
    # SQLAlchemy's asyncpg dialect sets it up (there: the binary format; the text one is the
    # same JSON without the jsonb version byte).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, encoder=_same, decoder=json.loads, schema="pg_catalog", format="text"
        )


def _same(value: str) -> str:
    return value


class _Pool:
    """The connections of one event loop."""

    def __init__(self, dsn: str, max_size: int, max_idle: int, idle_ping: float) -> None:
        self._dsn = dsn
        self._idle_ping = idle_ping
        self._slots = asyncio.Semaphore(max_size)
        self._idle: list[tuple[Any, float]] = []
        self._max_idle = max_idle
        self.closed = False
        self.group: _Group | None = None

    async def acquire(self) -> Any:
        await self._slots.acquire()
        try:
            while self._idle:
                conn, since = self._idle.pop()
                if conn.is_closed():
                    continue
                if time.monotonic() - since >= self._idle_ping:
                    try:
                        await conn.execute("SELECT 1", timeout=PING_TIMEOUT)
                    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                        conn.terminate()
                        continue
                return conn
            try:
                return await self._connect()
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
                raise sqlalchemy_error(error, None) from error
        except BaseException:
            self._slots.release()
            raise

    async def _connect(self) -> Any:
        conn = await asyncpg.connect(self._dsn, statement_cache_size=512)
        try:
            await _init_connection(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def alone(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """`work` on a connection of its own, in autocommit; the connection goes back fit for
        reuse unless `work` ended in a way that leaves it in an unknown state."""
        conn = await self.acquire()
        healthy = False
        try:
            result = await work(conn)
            healthy = True
            return result
        except BaseException as error:
            healthy = _fit_after(error)
            raise
        finally:
            self.release(conn, healthy)

    def release(self, conn: Any, healthy: bool) -> None:
        try:
            if (
                healthy
                and not self.closed
                and not conn.is_closed()
                and not conn.is_in_transaction()
                and len(self._idle) < self._max_idle
            ):
                self._idle.append((conn, time.monotonic()))
            else:
                conn.terminate()
        finally:
            self._slots.release()

    async def close(self) -> None:
        self.closed = True
        idle, self._idle = self._idle, []
        for conn, _since in idle:
            try:
                await conn.close(timeout=5)
            except Exception:  # the connection is going away either way
                conn.terminate()

    def terminate(self) -> None:
        """Close without the loop (its loop has ended)."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn, _since in idle:
            try:
                conn.terminate()
            except Exception:  # noqa: S112  the loop is gone; the socket closes when collected
                continue


class _Connection:
    """One unit of work's connection (`plans.AsyncConnection`)."""

    __slots__ = ("_conn", "_db", "_unit", "served")

    def __init__(self, db: PostgresDatabase, conn: Any, unit: Unit) -> None:
        self._db = db
        self._conn = conn
        self._unit = OneUnit(unit)
        self.served: Served | None = None
        """What this unit served from memory (`mercato.db.hints.note_served`)."""

    @property
    def refused(self) -> bool:
        return self._unit.refused

    async def execute(self, op: Op) -> Any:
        self._unit.check(op)
        if isinstance(op, Run):
            try:
                return await self._run(op)
            except guarded.Refused:
                self._unit.refused = True
                raise
        statements = self._db.statements
        params = op.params
        prepared, extracted = statements.prepare(op.statement, params)
        if params is not None and not isinstance(params, Mapping):
            return await self._many(prepared, extracted, params)
        sql, values = prepared.bind(params, extracted)
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        try:
            records = await self._conn.fetch(sql, *values)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, sql) from error
        return [prepared.row(record) for record in records]

    async def _many(
        self, prepared: Prepared, extracted: Any, params: Sequence[Mapping[str, Any]]
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        if self._db.observed.listeners:
            self._db.observed.tell("sql", prepared.sql)
        try:
            if prepared.dml_without_rows and not prepared.expanding and extracted is None:
                await self._conn.executemany(
                    prepared.sql, [prepared.bind(one)[1] for one in params]
                )
                return rows
            for one in params:
                sql, values = prepared.bind(one, extracted)
                rows.extend(prepared.row(record) for record in await self._conn.fetch(sql, *values))
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, prepared.sql) from error
        return rows

    async def _run(self, op: Run) -> dict[str, Any] | None:
        return await _fetch_program(self._conn, self._db, _bind_program(self._db, op))


class _Bound:
    """A money program ready to send: its SQL and values (fresh ids drawn once, in the
    caller's unit of work), and how to read its row."""

    __slots__ = ("built", "prepared", "sql", "values")

    def __init__(self, built: guarded.Compiled, prepared: Prepared, sql: str, values: Any) -> None:
        self.built = built
        self.prepared = prepared
        self.sql = sql
        self.values = values


def _bind_program(db: PostgresDatabase, op: Run) -> _Bound:
    built = guarded.compiled(op.program, "postgresql")
    assert built.statement is not None
    prepared, _ = db.statements.prepare(built.statement)
    sql, values = prepared.bind(program_values(built, op.params))
    return _Bound(built, prepared, sql, values)


async def _fetch_program(conn: Any, db: PostgresDatabase, bound: _Bound) -> dict[str, Any] | None:
    """Run a bound program on `conn`: its outputs, None when it stopped; raises
    `guarded.Refused` or the SQLAlchemy form of the driver's error."""
    sql = bound.sql
    if db.observed.listeners:
        db.observed.tell("sql", sql)
    try:
        record = await conn.fetchrow(sql, *bound.values)
    except _DRIVER_ERRORS as error:
        _program_error(error, sql)
    return _program_answer(bound, record)


_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


def _program_error(error: BaseException, sql: str) -> NoReturn:
    """Raise a money program's driver error: a refusal as `guarded.Refused`, any other in its
    SQLAlchemy form."""
    if isinstance(error, asyncpg.PostgresError) and error.sqlstate == _INVALID_TEXT:
        refused = guarded.parse_refusal(str(error))
        if refused is not None:
            raise refused from None
    raise sqlalchemy_error(error, sql) from error


def _program_answer(bound: _Bound, record: Any) -> dict[str, Any] | None:
    row = bound.prepared.row(record)
    if row[0] == 0:
        return None
    return dict(zip(bound.built.outputs, row[1:], strict=True))


async def _fetch_programs(conn: Any, db: PostgresDatabase, run: list[_Bound]) -> list[Any]:
    """Run several bound programs of one SQL text on `conn`, pipelined (asyncpg `fetchmany`:
    one round trip for all of them, executed in their order); raises as `_fetch_program`,
    without saying which program failed."""
    sql = run[0].sql
    if db.observed.listeners:
        db.observed.tell("sql", sql)
    try:
        records = await conn.fetchmany(sql, [bound.values for bound in run])
    except _DRIVER_ERRORS as error:
        _program_error(error, sql)
    if len(records) != len(run):
        raise sqlalchemy_error(asyncpg.InterfaceError("a money program returned no row"), sql)
    return [_program_answer(bound, record) for bound, record in zip(run, records, strict=True)]


GROUP_MAX = 32
"""At most this many money programs commit together."""
_GROUP_BEGIN = f"BEGIN; SELECT pg_advisory_xact_lock({guarded.MONEY_LOCK})"


class _Item:
    __slots__ = ("bound", "future")

    def __init__(self, bound: _Bound, future: asyncio.Future[Any]) -> None:
        self.bound = bound
        self.future = future


class _Group:
    """Group commit of one event loop's money programs (decision 0370).

    A money program locks rows every concurrent call of an account (its balances, its quota
    window) or every settle (the platform's revenue) must lock too, and holds them until its
    COMMIT has been flushed to disk: on one hot row, one program per WAL flush. So the
    `statement()` units of a loop queue their program here, and one task runs the queue:

    - one program waiting: it runs alone, in autocommit, as one round trip (no added latency);
    - several: up to `GROUP_MAX` run in ONE transaction (those of one SQL text pipelined, in
      one round trip: `_fetch_programs`), which first takes the money lock exclusively
      (`guarded.MONEY_LOCK`; every program takes it shared before any row lock, so no other
      money statement, of this process or another, interleaves its row locks with the
      group's: no deadlock), then COMMIT: one flush for all of them. Each program's answer
      is given only after that COMMIT.
    - when a program of a group fails (a refusal, a unique violation, any error), the whole
      transaction is rolled back (nothing of the group is written), that program (or each
      program pipelined with it) runs again alone, in autocommit, and its own answer is the
      one its caller gets (exactly as without grouping); the others go back to the head of
      the queue. A COMMIT the server refuses
      (the transaction rolled back) runs each program alone; a COMMIT whose outcome is unknown
      (the connection broke) fails every program of the group with that error, as it would
      fail a single statement.
    """

    def __init__(self, db: PostgresDatabase, pool: _Pool) -> None:
        self._db = db
        self._pool = pool
        self._queue: collections.deque[_Item] = collections.deque()
        self._task: asyncio.Task[None] | None = None

    async def submit(self, bound: _Bound) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        item = _Item(bound, loop.create_future())
        self._queue.append(item)
        if self._task is None:
            self._task = loop.create_task(self._drain())
        result: dict[str, Any] | None = await item.future
        return result

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch: list[_Item] = []
                while self._queue and len(batch) < GROUP_MAX:
                    item = self._queue.popleft()
                    if not item.future.done():  # its caller was cancelled before it ran
                        batch.append(item)
                try:
                    if len(batch) == 1:
                        await self._alone(batch[0])
                    elif batch:
                        await self._together(batch)
                except BaseException as error:  # a bug here must not leave callers waiting
                    _fail(batch, error)
                    if not isinstance(error, Exception):
                        _fail(list(self._queue), error)
                        self._queue.clear()
                        raise
        finally:
            self._task = None

    async def _once(self, bound: _Bound) -> dict[str, Any] | None:
        """One program alone, in autocommit."""
        db = self._db
        return await self._pool.alone(lambda conn: _fetch_program(conn, db, bound))

    async def _alone(self, item: _Item) -> None:
        try:
            result = await self._once(item.bound)
        except Exception as error:
            _fail([item], error)
            return
        if not item.future.done():
            item.future.set_result(result)

    async def _together(self, batch: list[_Item]) -> None:
        pool = self._pool
        observed = self._db.observed
        conn = await pool.acquire()
        healthy = False
        results: list[dict[str, Any] | None] = []
        failed: int | None = None
        failed_run = 1
        committing = False
        try:
            if observed.listeners:
                observed.tell("sql", _GROUP_BEGIN)
            await conn.execute(_GROUP_BEGIN)
            # The programs of one SQL text go together, pipelined, in their order (a group's
            # programs are concurrent calls': any serial order is one they could have had).
            runs: dict[str, list[_Item]] = {}
            for item in batch:
                runs.setdefault(item.bound.sql, []).append(item)
            batch = [item for run in runs.values() for item in run]
            for run in runs.values():
                try:
                    if len(run) == 1:
                        results.append(await _fetch_program(conn, self._db, run[0].bound))
                    else:
                        bounds = [item.bound for item in run]
                        results.extend(await _fetch_programs(conn, self._db, bounds))
                except (guarded.Refused, DBAPIError):
                    failed = len(results)
                    failed_run = len(run)
                    break
            if failed is not None:
                if observed.listeners:
                    observed.tell("sql", "ROLLBACK")
                await conn.execute("ROLLBACK")
                healthy = True
            else:
                if observed.listeners:
                    observed.tell("sql", "COMMIT")
                committing = True
                try:
                    await conn.execute("COMMIT")
                except asyncpg.PostgresError:  # the server rolled the group back
                    healthy = not conn.is_in_transaction()
                    failed = -1
                else:
                    healthy = True
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            healthy = False
            if committing:  # whether the COMMIT was applied is unknown, as for one statement
                _fail(batch, sqlalchemy_error(error, "COMMIT"))
                return
            failed = -1  # BEGIN or ROLLBACK failed: nothing of the group was written
        except BaseException as error:
            healthy = _fit_after(error)
            raise
        finally:
            pool.release(conn, healthy)
        if failed is None:
            for item, result in zip(batch, results, strict=True):
                if not item.future.done():
                    item.future.set_result(result)
        elif failed < 0:
            for item in batch:
                await self._alone(item)
        else:
            # Nothing of the group was written: the one that failed (or each of the pipelined
            # ones, one of which failed) gets its own answer alone; the others run again,
            # next, in their order.
            failing = batch[failed : failed + failed_run]
            self._queue.extendleft(reversed(batch[:failed] + batch[failed + failed_run :]))
            for item in failing:
                await self._alone(item)


def _fail(items: list[_Item], error: BaseException) -> None:
    for item in items:
        if item.future.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            item.future.cancel()
        else:
            item.future.set_exception(error)


class _Grouped:
    """A `statement()` unit's connection on PostgreSQL: its money program goes to the loop's
    `_Group`; any other single statement runs alone in autocommit."""

    __slots__ = ("_db", "_pool", "_unit")

    def __init__(self, db: PostgresDatabase, pool: _Pool) -> None:
        self._db = db
        self._pool = pool
        self._unit = OneUnit(Unit.STATEMENT)

    @property
    def refused(self) -> bool:
        return self._unit.refused

    async def execute(self, op: Op) -> Any:
        self._unit.check(op)
        pool = self._pool
        if isinstance(op, Run):
            group = pool.group
            if group is None:
                group = pool.group = _Group(self._db, pool)
            try:
                return await group.submit(_bind_program(self._db, op))
            except guarded.Refused:
                self._unit.refused = True
                raise
        db = self._db
        return await pool.alone(lambda conn: _Connection(db, conn, Unit.TRANSACTION).execute(op))


class _ReadUnit:
    """`PostgresDatabase.read()`: a connection in autocommit for the block, as
    `_unit(Unit.READ, begin=False)` gives it (nothing to begin or end), written as a class:
    no generator and no `contextmanager` objects to make and step through per unit (a replay
    is one read unit; decision 0430)."""

    __slots__ = ("_conn", "_db", "_pool", "_token")

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        self._token = bind(db._sync.ids)  # as `_unit`: fresh ids drawn in the unit are its own
        try:
            if db.observed.listeners:
                db.observed.tell("unit", Unit.READ.value)
            pool = self._pool = db._pool()
            conn = self._conn = await pool.acquire()
        except BaseException:
            unbind(self._token)
            raise
        return _Connection(db, conn, Unit.READ)

    async def __aexit__(self, kind: object, error: BaseException | None, _tb: object) -> None:
        try:
            self._pool.release(self._conn, error is None or _fit_after(error))
        finally:
            unbind(self._token)


def _fit_after(error: BaseException) -> bool:
    """Whether a connection is fit for reuse after a unit of work ended with `error` (a
    cancelled query leaves the connection in an unknown state: it is discarded)."""
    if isinstance(error, asyncio.CancelledError | TimeoutError):
        return False
    return not (isinstance(error, DBAPIError) and error.connection_invalidated)


class PostgresDatabase:
    """`plans.AsyncDatabase` on PostgreSQL (see the module docstring)."""

    dialect: str = "postgresql"

    def __init__(
        self,
        db: Database,
        *,
        max_size: int = 20,
        max_idle: int = 20,
        idle_ping_seconds: float = IDLE_PING_SECONDS,
    ) -> None:
        self._idle_ping = idle_ping_seconds
        self.observed = Observed()
        self._sync = db  # its ids, read at each unit: a test may give the Database new ones
        self.statements = Statements(asyncpg_dialect())
        url = db.engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._max_size = max_size
        self._max_idle = max_idle
        self._pools_lock = threading.Lock()
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = (
            weakref.WeakKeyDictionary()
        )

    def _pool(self) -> _Pool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        with self._pools_lock:  # loops on other threads may be making theirs
            for other, stale in list(self._pools.items()):
                if other.is_closed():
                    stale.terminate()
                    self._pools.pop(other, None)
            pool = self._pools[loop] = _Pool(
                self._dsn, self._max_size, self._max_idle, self._idle_ping
            )
        return pool

    @asynccontextmanager
    async def _unit(self, unit: Unit, begin: bool) -> AsyncIterator[AsyncConnection]:
        with bound(self._sync.ids):
            if self.observed.listeners:
                self.observed.tell("unit", unit.value)
            pool = self._pool()
            conn = await pool.acquire()
            healthy = False
            try:
                if begin:
                    await self._control(conn, "BEGIN", self.observed)
                unit_conn = _Connection(self, conn, unit)
                try:
                    yield unit_conn
                except BaseException as error:
                    healthy = _fit_after(error)
                    if begin and healthy:
                        try:
                            self.observed.tell("sql", "ROLLBACK")
                            await conn.execute("ROLLBACK")
                        except Exception:  # the unit's own error is the one to raise
                            healthy = False
                    raise
                if begin:  # a refusal aborted the transaction: COMMIT would roll back too
                    end = "ROLLBACK" if unit_conn.refused else "COMMIT"
                    await self._control(conn, end, self.observed)
                healthy = True
            finally:
                pool.release(conn, healthy)

    @staticmethod
    async def _control(conn: Any, sql: str, observed: Observed) -> None:
        observed.tell("sql", sql)
        try:
            await conn.execute(sql)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, sql) from error

    def read(self) -> Any:
        return _ReadUnit(self)

    def transaction(self) -> Any:
        return self._unit(Unit.TRANSACTION, begin=True)

    def statement(self) -> Any:
        return self._grouped()

    @asynccontextmanager
    async def _grouped(self) -> AsyncIterator[AsyncConnection]:
        with bound(self._sync.ids):  # the program's fresh ids are drawn in the unit
            if self.observed.listeners:
                self.observed.tell("unit", Unit.STATEMENT.value)
            yield _Grouped(self, self._pool())

    def dispose_ended(self) -> None:
        """Close the connections of the loops that have ended (without a loop: called by the
        sync `Database.dispose`)."""
        with self._pools_lock:
            ended = [(loop, pool) for loop, pool in self._pools.items() if loop.is_closed()]
            for loop, _pool in ended:
                self._pools.pop(loop, None)
        for _loop, pool in ended:
            pool.terminate()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            pools = list(self._pools.items())
            self._pools.clear()
        for other, pool in pools:
            if other is loop:
                await pool.close()
            else:
                pool.terminate()
