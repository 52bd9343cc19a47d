"""The async database on PostgreSQL: the bare asyncpg driver (decisions 0320, 0323).

Statements are compiled once for SQLAlchemy's `postgresql+asyncpg` dialect (`$n` placeholders
with their casts) and executed as text on asyncpg connections, whose own prepared-statement
cache then parses each text once per connection. A guarded money program (`Run`) is its one
statement (`guarded.compiled(program, "postgresql").statement`): one round trip; a refusal
aborts it with SQLSTATE 22P02 and comes back as `guarded.Refused`.

Units of work: `read()` and `statement()` run in autocommit (no BEGIN: one round trip per
statement); `transaction()` sends BEGIN, then COMMIT or ROLLBACK.

Connections: one small pool per event loop (asyncpg connections belong to the loop that opened
them, and a Runtime is used from several loops over its life in tests), made lazily inside the
running loop. The pool is this module's own, not asyncpg's: a connection goes back without a
reset query (the path sets no session state, and a unit that fails mid-transaction rolls back
or discards its connection), and one idle for longer than `engine.IDLE_PING_SECONDS` is pinged
before use and replaced when dead (decision 0183's rule on the sync engine).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import DBAPIError

from mercato.core.ids import bound
from mercato.db import guarded
from mercato.db.aio import Observed, OneUnit, Unit, program_values
from mercato.db.aio_statements import Prepared, Statements, sqlalchemy_error
from mercato.db.engine import IDLE_PING_SECONDS
from mercato.db.plans import AsyncConnection, Op, Run
from mercato.db.uow import Database

_INVALID_TEXT = "22P02"
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

    __slots__ = ("_conn", "_db", "_unit")

    def __init__(self, db: PostgresDatabase, conn: Any, unit: Unit) -> None:
        self._db = db
        self._conn = conn
        self._unit = OneUnit(unit)

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
        built = guarded.compiled(op.program, "postgresql")
        assert built.statement is not None
        prepared, _ = self._db.statements.prepare(built.statement)
        sql, values = prepared.bind(program_values(built, op.params))
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        try:
            record = await self._conn.fetchrow(sql, *values)
        except asyncpg.PostgresError as error:
            if error.sqlstate == _INVALID_TEXT:
                refused = guarded.parse_refusal(str(error))
                if refused is not None:
                    raise refused from None
            raise sqlalchemy_error(error, sql) from error
        except (asyncpg.InterfaceError, OSError) as error:
            raise sqlalchemy_error(error, sql) from error
        row = prepared.row(record)
        if row[0] == 0:
            return None
        return dict(zip(built.outputs, row[1:], strict=True))


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
        max_idle: int = 10,
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
        return self._unit(Unit.READ, begin=False)

    def transaction(self) -> Any:
        return self._unit(Unit.TRANSACTION, begin=True)

    def statement(self) -> Any:
        return self._unit(Unit.STATEMENT, begin=False)

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
