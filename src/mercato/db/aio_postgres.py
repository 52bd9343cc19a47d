"""The async database on PostgreSQL: the bare asyncpg driver (decisions 0320, 0323).

Statements are compiled once for SQLAlchemy's `postgresql+asyncpg` dialect (`$n` placeholders
with their casts) and executed as text on asyncpg connections, whose own prepared-statement
cache then parses each text once per connection. A guarded money program (`Run`) is its one
statement (`guarded.compiled(program, "postgresql").statement`): one round trip, run by
`mercato.db.runner` (which reads its row, and the refusal it aborts with, SQLSTATE 22P02, as
`guarded.Refused`); this module only sends it.

Units of work: `read()` runs in autocommit (no BEGIN: one round trip per statement);
`transaction()` sends BEGIN, then COMMIT or ROLLBACK; `statement()` hands its money program to
the loop's group commit (`_Group`, decisions 0370, 0440): alone it runs in autocommit, one round
trip; several of one SQL text waiting together go pipelined in one round trip and commit in one
implicit transaction, one WAL flush.

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

from mercato.core.ids import bound, unbind
from mercato.db.aio import (
    Observed,
    OneUnit,
    Unit,
    Writes,
    begin_unit,
    fail_waiting,
)
from mercato.db.aio_reads import SLOT, is_grouped, read_group, with_slot
from mercato.db.aio_statements import Prepared, ProgramStatement, Statements, sqlalchemy_error
from mercato.db.engine import IDLE_PING_SECONDS
from mercato.db.plans import AsyncConnection, Op, Run
from mercato.db.runner import Programs, Runnable
from mercato.db.uow import Database

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
    """One unit of work's connection (`plans.AsyncConnection`). Without a driver connection
    (a read unit's, `_ReadUnit`), it takes one from the loop's pool at its first statement
    that is not a grouped read (decision 0501: a grouped read goes with the loop's others,
    `aio_reads`) and keeps it to the unit's end."""

    __slots__ = ("_conn", "_db", "_pool", "_unit")

    def __init__(self, db: PostgresDatabase, conn: Any, unit: Unit) -> None:
        self._db = db
        self._conn = conn
        self._pool: _Pool | None = None
        """The pool this unit took its connection from (a read unit's, at its first statement)."""
        self._unit = OneUnit(unit)

    @property
    def refused(self) -> bool:
        return self._unit.refused

    async def _take(self) -> None:
        """Take a connection from the loop's pool; the unit's end gives it back."""
        pool = self._db._pool()
        self._conn = await pool.acquire()
        self._pool = pool  # only once taken: the unit's end gives back what it holds

    async def execute(self, op: Op) -> Any:
        self._unit.check(op)
        if isinstance(op, Run):
            if self._conn is None:
                await self._take()
            try:
                return await self._run(op)
            except BaseException:  # a refused or failed program aborts its unit (decision 0324)
                self._unit.refused = True
                raise
        statements = self._db.statements
        params = op.params
        if self._unit.unit is Unit.READ and is_grouped(op.statement):  # decision 0450
            return await self._grouped(op.statement, params)
        prepared = statements.prepare(op.statement, params)
        if params is not None and not isinstance(params, Mapping):
            if self._conn is None:
                await self._take()
            return await self._many(prepared, params)
        sql, values = prepared.bind(params)
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        if self._conn is None:
            await self._take()
        try:
            records = await self._conn.fetch(sql, *values)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, sql) from error
        return [prepared.row(record) for record in records]

    async def _grouped(self, statement: Any, params: Any) -> list[tuple[Any, ...]]:
        """A grouped read, with the others of the loop (`aio_reads`): sent with its place in
        the batch (`with_slot`), its rows read back without it. A unit that holds no
        connection yet takes none for it (decision 0501): the batch runs on a reader's, or on
        one of its own."""
        prepared = self._db.statements.prepare(with_slot(statement), params)
        sql, values = prepared.bind({**(params or {}), SLOT: 0})
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        pool = self._pool or self._db._pool()
        rows = await read_group().fetch(self._conn, prepared, values, pool)
        return [row[:-1] for row in rows]

    async def _many(
        self, prepared: Prepared, params: Sequence[Mapping[str, Any]]
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        if self._db.observed.listeners:
            self._db.observed.tell("sql", prepared.sql)
        try:
            if prepared.dml_without_rows and not prepared.expanding:
                await self._conn.executemany(
                    prepared.sql, [prepared.bind(one)[1] for one in params]
                )
                return rows
            for one in params:
                sql, values = prepared.bind(one)
                rows.extend(prepared.row(record) for record in await self._conn.fetch(sql, *values))
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, prepared.sql) from error
        return rows

    async def _run(self, op: Run) -> dict[str, Any] | None:
        return await _fetch_program(self._conn, self._db, _Bound(self._db, op))


class _Bound:
    """A money program ready to send: its run (`runner.Runnable.run`, waiting at its one
    statement), the values sent (fresh ids drawn once, in the caller's unit of work) and the
    program's two texts: the money lock shared (alone) or exclusive (in a group)."""

    __slots__ = ("exclusive", "run", "statement", "values")

    def __init__(self, db: PostgresDatabase, op: Run) -> None:
        runnable = db.program(op.program)
        values = runnable.values(op.params)
        self.run = runnable.run(values, op.refusal)
        _kind, statement = next(self.run)
        self.statement: ProgramStatement = statement
        self.exclusive: ProgramStatement | None = runnable.exclusive
        self.values = statement.values(values, {})

    def answer(self, record: Any) -> dict[str, Any] | None:
        """The program's outputs from its row (None: it stopped)."""
        try:
            self.run.send(self.statement.prepared.row(record))
        except StopIteration as stop:
            outputs: dict[str, Any] | None = stop.value
            return outputs
        raise AssertionError("a PostgreSQL program is one statement")

    def failed(self, error: BaseException, sql: str) -> NoReturn:
        """Raise the driver's `error`: a refusal as `guarded.Refused` (the runner reads it),
        any other in its SQLAlchemy form."""
        converted = sqlalchemy_error(error, sql)
        converted.__cause__ = error
        self.run.throw(converted)
        raise AssertionError("a PostgreSQL program is one statement")


async def _fetch_program(conn: Any, db: PostgresDatabase, bound: _Bound) -> dict[str, Any] | None:
    """Run a bound program on `conn`: its outputs, None when it stopped; raises
    `guarded.Refused` or the SQLAlchemy form of the driver's error."""
    sql = bound.statement.sql
    if db.observed.listeners:
        db.observed.tell("sql", sql)
    try:
        record = await conn.fetchrow(sql, *bound.values)
    except _DRIVER_ERRORS as error:
        bound.failed(error, sql)
    return bound.answer(record)


_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


def _binds_alike(runnable: Runnable[ProgramStatement]) -> None:
    """A group sends a program's exclusive text with the values bound for its shared one: both
    must take the same values in the same places."""
    shared, exclusive = runnable.statement, runnable.exclusive
    assert shared is not None and exclusive is not None
    if _placeholders(shared) != _placeholders(exclusive):
        raise AssertionError(f"{runnable.program.name}: the two texts bind differently")


def _placeholders(statement: ProgramStatement) -> list[Any]:
    """What each placeholder of a program's text takes: an input or a step's column by name,
    a value of the statement's own by that value (its anonymous name differs per build)."""
    return [
        key if key.startswith(("p_", "s_")) else (repr(value), required, make is None)
        for key, value, required, make, _process in statement.prepared.binds
    ]


GROUP_MAX = 32
"""At most this many money programs commit together."""


class _Item:
    __slots__ = ("bound", "future")

    def __init__(self, bound: _Bound, future: asyncio.Future[Any]) -> None:
        self.bound = bound
        self.future = future


class _Group:
    """Group commit of one event loop's money programs (decisions 0370, 0411, 0440).

    A money program locks rows every concurrent call of an account (its balances, its quota
    window) or every settle (the platform's revenue) must lock too, and holds them until its
    COMMIT has been flushed to disk: on one hot row, one program per WAL flush. So the
    `statement()` units of a loop queue their program here, and one task runs the queue, a
    batch of at most `GROUP_MAX` at a time (a program submitted while nothing is in flight is
    a batch of one, run by its caller: `submit`):

    - the programs of one SQL text (every accept, every settle: only the values differ) go
      together in ONE asyncpg `fetchmany`, in autocommit: pipelined, one round trip, and one
      implicit transaction (one Sync for all: all commit, one WAL flush, or none does). Their
      text is the program's with the money lock taken exclusively (`Compiled.exclusive`;
      every program takes it first, shared when alone, before any row lock), so no other money
      statement, of this process or another, interleaves its row locks with the group's: no
      deadlock. The lock is held from the group's first program to its commit, all inside the
      server: no round trip to this process while other processes' programs wait for it.
      Each program's answer is given only after that commit (asyncpg returns at the Sync).
    - a text with one program in the batch runs alone, in autocommit (one round trip, the lock
      shared: nothing added at one client). The texts of a batch run side by side, each on a
      connection of its own (they meet at the lock in the server, one after another).
    - when the server reports an error for a group (a refusal, a unique violation, a refused
      commit, any error), nothing of it was written (its one transaction rolled back): each of
      its programs runs again alone, and its own answer is the one its caller gets (exactly as
      without grouping). When the outcome is unknown (the connection broke), every program of
      the group fails with that error, as it would fail a single statement.
    """

    def __init__(self, db: PostgresDatabase, pool: _Pool) -> None:
        self._db = db
        self._pool = pool
        self._queue: collections.deque[_Item] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._inline = False
        """A caller is running its program alone (`submit`): what is queued waits for it."""

    async def submit(self, bound: _Bound) -> dict[str, Any] | None:
        if self._task is None and not self._inline:
            # Nothing in flight: this program is a batch of one, run by its caller (no task
            # to start, no future to wake: a loop turn less each way, which is what a lone
            # call waits for). Programs submitted meanwhile queue behind it, as they would
            # behind a batch of the task's, and the task drains them once it is done.
            self._inline = True
            try:
                return await self._once(bound)
            finally:
                self._inline = False
                if self._queue and self._task is None:
                    self._task = asyncio.get_running_loop().create_task(self._drain())
        item = _Item(bound, asyncio.get_running_loop().create_future())
        self._queue.append(item)  # the task, or the caller running alone, drains it
        result: dict[str, Any] | None = await item.future
        return result

    async def _drain(self) -> None:
        try:
            while self._queue:
                runs: dict[str, list[_Item]] = {}
                taken = 0
                while self._queue and taken < GROUP_MAX:
                    item = self._queue.popleft()
                    if not item.future.done():  # its caller was cancelled before it ran
                        runs.setdefault(item.bound.statement.sql, []).append(item)
                        taken += 1
                batch = [item for run in runs.values() for item in run]
                try:
                    if len(runs) == 1:
                        await self._run(batch)
                    elif runs:
                        await asyncio.gather(*(self._run(run) for run in runs.values()))
                except BaseException as error:  # a bug here must not leave callers waiting
                    fail_waiting(batch, error)
                    if not isinstance(error, Exception):
                        fail_waiting(list(self._queue), error)
                        self._queue.clear()
                        raise
        finally:
            self._task = None

    async def _run(self, run: list[_Item]) -> None:
        if len(run) == 1:
            await self._alone(run[0])
        else:
            await self._together(run)

    async def _once(self, bound: _Bound) -> dict[str, Any] | None:
        """One program alone, in autocommit."""
        db = self._db
        return await self._pool.alone(lambda conn: _fetch_program(conn, db, bound))

    async def _alone(self, item: _Item) -> None:
        try:
            result = await self._once(item.bound)
        except Exception as error:
            fail_waiting([item], error)
            return
        if not item.future.done():
            item.future.set_result(result)

    async def _together(self, run: list[_Item]) -> None:
        """Programs of one SQL text, pipelined in one implicit transaction (see the class)."""
        pool = self._pool
        exclusive = run[0].bound.exclusive
        assert exclusive is not None
        sql = exclusive.sql
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        conn = await pool.acquire()
        healthy = False
        try:
            records = await conn.fetchmany(sql, [item.bound.values for item in run])
            healthy = True
        except asyncpg.PostgresError:  # the server rolled the group back: nothing written
            healthy = not conn.is_in_transaction()
            records = None
        except (asyncpg.InterfaceError, OSError) as error:  # whether it committed is unknown
            fail_waiting(run, sqlalchemy_error(error, sql))
            return
        except BaseException as error:
            healthy = _fit_after(error)
            raise
        finally:
            pool.release(conn, healthy)
        if records is None:
            for item in run:
                await self._alone(item)
            return
        if len(records) != len(run):  # committed, yet not one row per program
            missing = asyncpg.InterfaceError("a money program returned no row")
            fail_waiting(run, sqlalchemy_error(missing, sql))
            return
        for item, record in zip(run, records, strict=True):
            if not item.future.done():
                item.future.set_result(item.bound.answer(record))


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
                return await group.submit(_Bound(self._db, op))
            except BaseException:  # a refused or failed program aborts its unit (decision 0324)
                self._unit.refused = True
                raise
        db = self._db
        return await pool.alone(lambda conn: _Connection(db, conn, Unit.TRANSACTION).execute(op))


class _ReadUnit:
    """`PostgresDatabase.read()`: a connection in autocommit for the block, as
    `_unit(Unit.READ, begin=False)` gives it (nothing to begin or end), written as a class:
    no generator and no `contextmanager` objects to make and step through per unit (a replay
    is one read unit; decision 0430). The driver connection is taken from the pool at the
    unit's first statement (`_Connection`): a unit that reads nothing (a warm invoke's, served
    from memory: decision 0400) takes none (decision 0461), nor does one whose reads are all
    grouped (a replay's: decision 0501)."""

    __slots__ = ("_db", "_token", "_unit")

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        # As `_unit`: fresh ids drawn in the unit are its own.
        self._token = begin_unit(db.observed, db._sync.ids, Unit.READ)
        unit = self._unit = _Connection(db, None, Unit.READ)
        return unit

    async def __aexit__(self, kind: object, error: BaseException | None, _tb: object) -> None:
        try:
            unit = self._unit
            if unit._pool is not None:
                unit._pool.release(unit._conn, error is None or _fit_after(error))
        finally:
            unbind(self._token)


class _StatementUnit:
    """`PostgresDatabase.statement()`: its operation goes to the loop's `_Group` (a money
    program) or runs alone (`_Grouped`), written as a class for the reason `_ReadUnit` is (two
    per invoke: accept and settle)."""

    __slots__ = ("_db", "_token")

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        # The program's fresh ids are drawn in the unit.
        token = begin_unit(db.observed, db._sync.ids, Unit.STATEMENT)
        try:
            grouped = _Grouped(db, db._pool())
        except BaseException:
            unbind(token)
            raise
        self._token = token
        return grouped

    async def __aexit__(self, kind: object, error: BaseException | None, _tb: object) -> None:
        unbind(self._token)


def _fit_after(error: BaseException) -> bool:
    """Whether a connection is fit for reuse after a unit of work ended with `error` (a
    cancelled query leaves the connection in an unknown state: it is discarded)."""
    if isinstance(error, asyncio.CancelledError | TimeoutError):
        return False
    return not (isinstance(error, DBAPIError) and error.connection_invalidated)


class PostgresDatabase(Writes):
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
        dialect = self.statements.dialect
        self.program: Programs[ProgramStatement] = Programs(
            "postgresql",
            lambda clause, literals: ProgramStatement(clause, literals, dialect),
            check=_binds_alike,
        )
        """Each program's two texts compiled for asyncpg, once."""
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
        return _StatementUnit(self)

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
