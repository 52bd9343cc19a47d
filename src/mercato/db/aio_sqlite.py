"""The async database on SQLite: sqlite3 on the event loop, no thread hop (decision 0322).

A statement on a local SQLite file takes microseconds, less than handing it to a thread and
back, so each unit of work runs its statements directly on the loop. What could block the loop
is SQLite's lock wait, so connections run with `busy_timeout=0`:

- a write unit (`transaction()`) takes the write lock with BEGIN IMMEDIATE, and when another
  connection holds it (another process, another thread's loop, the sync side) gets
  SQLITE_BUSY at once and retries after an `await sleep(backoff)` (0.5 ms doubling to 20 ms;
  `OperationalError` "database is locked" after `lock_timeout`, 30 s like the sync engine's
  busy timeout). Writers on the same loop queue on an `asyncio.Lock` first, so they never
  poll against each other;
- a `statement()` unit's money program (accept, settle, release) is committed with the other
  programs its loop has queued, in one transaction (`_Group`, decision 0455);
- a read is one DEFERRED transaction (a WAL snapshot; readers do not wait for the writer),
  ended with a rollback; a grouped statement (`aio_reads.grouped`, a replay's one read) that
  is its first runs alone on its own snapshot, as on PostgreSQL, and the transaction begins
  at the unit's next statement (decision 0475);
- the connection settings are the sync engine's (WAL, foreign keys, synchronous=NORMAL), but
  for the WAL's automatic checkpoint, ten times rarer (`WAL_AUTOCHECKPOINT_PAGES`), and
  temporary data (a group's savepoint journal) kept in memory.

Connections are plain sqlite3 connections (not bound to a loop or thread), kept in one idle
list shared by every loop the Runtime is used from.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from sqlalchemy.exc import DBAPIError

from mercato.core.ids import bind, unbind
from mercato.db import guarded
from mercato.db.aio import Observed, OneUnit, Unit, Writes, begin_unit, fail_waiting
from mercato.db.aio_reads import is_grouped
from mercato.db.aio_statements import Prepared, ProgramStatement, Statements, sqlalchemy_error
from mercato.db.plans import AsyncConnection, Op, Rows, Run
from mercato.db.runner import COUNT, Programs, Runnable, drive
from mercato.db.uow import Database

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
FIRST_BACKOFF = 0.0005
MAX_BACKOFF = 0.02
WAL_AUTOCHECKPOINT_PAGES = 10_000
"""A commit on these connections checkpoints once the WAL holds this many pages (SQLite's
default is 1,000). An invoke writes about 44 WAL frames, most of them to the same few hot pages
(the caller's balances, its quota window, the tables' last leaves), and a checkpoint copies
each page once and syncs twice, on the loop: ten times fewer checkpoints copy far fewer pages
and sync 175 → 19 times per 1,300 invokes, for a WAL of at most about 40 MB (decision 0436)."""


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY


class _Connection:
    """One unit of work's connection (`plans.AsyncConnection`)."""

    __slots__ = ("_begun", "_db", "_raw", "_unit")

    def __init__(self, db: SqliteDatabase, raw: sqlite3.Connection | None, unit: Unit) -> None:
        self._db = db
        self._raw = raw
        """None in a read unit until its first statement (`_ReadUnit`)."""
        self._begun = True
        """False in a read unit whose first statement ran alone, until its next one."""
        self._unit = OneUnit(unit)

    async def execute(self, op: Op) -> Any:
        self._unit.check(op)
        if type(op) is Run:
            try:
                return self._run(op)
            except BaseException:  # a refused or failed program aborts its unit (decision 0324)
                self._unit.refused = True
                raise
        assert isinstance(op, Rows)
        if self._unit.unit is not Unit.READ:
            return self._rows(op.statement, op.params)
        if self._raw is None:
            if is_grouped(op.statement):
                # A grouped read goes alone on PostgreSQL (its own snapshot, decision 0450):
                # here too, without the BEGIN and ROLLBACK around it (12 K instructions, a
                # replay's one statement); a next statement begins the transaction.
                self._raw = self._db._checkout()
                self._begun = False
            else:
                self._raw = self._db._begin_read()
        elif not self._begun:
            self._db._begin(self._raw)
            self._begun = True
        # A reader does not wait for the writer in WAL mode, but can find the WAL index
        # busy for an instant (a checkpoint resetting it): it retries without blocking.
        delay, deadline = FIRST_BACKOFF, time.monotonic() + self._db.lock_timeout
        while True:
            try:
                return self._rows(op.statement, op.params)
            except DBAPIError as error:
                busy = isinstance(error.orig, sqlite3.Error) and _is_busy(error.orig)
                if not busy or time.monotonic() >= deadline:
                    raise
            await self._db.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)

    @property
    def refused(self) -> bool:
        return self._unit.refused

    def _rows(self, statement: Any, params: Any) -> list[tuple[Any, ...]]:
        prepared = self._db.statements.prepare(statement, params)
        if params is not None and type(params) is not dict and not isinstance(params, Mapping):
            return self._many(prepared, params)
        sql, values = prepared.bind(params)
        return self._send(prepared, sql, values)

    def _send(self, prepared: Prepared, sql: str, values: list[Any]) -> list[tuple[Any, ...]]:
        if self._db.observed.listeners:
            self._db.observed.tell("sql", sql)
        assert self._raw is not None
        try:
            raw = self._raw.execute(sql, values).fetchall()
        except sqlite3.Error as error:
            raise sqlalchemy_error(error, sql) from error
        return prepared.rows(raw)

    def _many(self, prepared: Any, params: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        if self._db.observed.listeners:
            self._db.observed.tell("sql", prepared.sql)
        assert self._raw is not None
        if prepared.dml_without_rows and not prepared.expanding:
            bound_values = [prepared.bind(one)[1] for one in params]
            try:
                self._raw.executemany(prepared.sql, bound_values)
            except sqlite3.Error as error:
                raise sqlalchemy_error(error, prepared.sql) from error
            return rows
        for one in params:
            sql, values = prepared.bind(one)
            try:
                raw = self._raw.execute(sql, values).fetchall()
            except sqlite3.Error as error:
                raise sqlalchemy_error(error, sql) from error
            rows.extend(prepared.row(row) for row in raw)
        return rows

    def _run(self, op: Run) -> dict[str, Any] | None:
        program = self._db.program(op.program)
        assert self._raw is not None
        return _run_program(self._db, self._raw, program, program.values(op.params), op.refusal)


def _run_program(
    db: SqliteDatabase,
    raw: sqlite3.Connection,
    runnable: Runnable[ProgramStatement],
    values: dict[str, Any],
    refusal: guarded.Refusal | None = None,
) -> dict[str, Any] | None:
    """`runnable` run on `raw`, in its transaction (a refusal raised as `refusal` makes it):
    each statement the runner asks for sent as compiled once (`ProgramStatement`), each value
    processed once per run."""
    done: dict[Any, Any] = {}
    observed = db.observed
    listeners = observed.listeners  # the same list while listeners come and go
    execute = raw.execute

    def send(kind: int, statement: ProgramStatement) -> Any:
        sql = statement.sql
        if listeners:
            observed.tell("sql", sql)
        try:
            cursor = execute(sql, statement.values(values, done))
        except sqlite3.Error as error:
            raise sqlalchemy_error(error, sql) from error
        if kind == COUNT:
            return cursor.rowcount
        found = cursor.fetchone()
        return None if found is None else statement.prepared.row(found)

    return drive(runnable.run(values, refusal), send)


class SqliteDatabase(Writes):
    """`plans.AsyncDatabase` on SQLite (see the module docstring)."""

    dialect: str = "sqlite"

    def __init__(
        self,
        db: Database,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        lock_timeout: float = 30.0,
        max_idle: int = 16,
    ) -> None:
        self._sync = db  # its ids, read at each unit: a test may give the Database new ones
        self.statements = Statements(db.engine.dialect)
        self._path = db.engine.url.database or ":memory:"
        self.sleep = sleep
        self.lock_timeout = lock_timeout
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()
        self._max_idle = max_idle
        self._writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Group] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False
        self.observed = Observed()
        dialect = self.statements.dialect
        self.program: Programs[ProgramStatement] = Programs(
            "sqlite", lambda clause, literals: ProgramStatement(clause, literals, dialect)
        )
        """Each program's statements compiled for sqlite3, once."""

    # --- connections --------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            raw = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            raw.execute("PRAGMA journal_mode=WAL")
            raw.execute("PRAGMA foreign_keys=ON")
            raw.execute("PRAGMA synchronous=NORMAL")
            raw.execute("PRAGMA busy_timeout=0")
            raw.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            # A group's savepoints journal the pages they change: in memory, not in a temp
            # file spilled to disk past 64 KiB, created and written for every group (0455).
            raw.execute("PRAGMA temp_store=MEMORY")
        except sqlite3.Error as error:
            raise sqlalchemy_error(error, None) from error
        return raw

    def _checkout(self) -> sqlite3.Connection:
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _checkin(self, raw: sqlite3.Connection, healthy: bool) -> None:
        if healthy and not raw.in_transaction:
            with self._idle_lock:
                if not self._closed and len(self._idle) < self._max_idle:
                    self._idle.append(raw)
                    return
        raw.close()

    def _writer_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._writers.get(loop)
        if lock is None:
            with self._idle_lock:
                lock = self._writers.get(loop)
                if lock is None:
                    lock = self._writers[loop] = asyncio.Lock()
        return lock

    def _begin_read(self) -> sqlite3.Connection:
        """A connection in a DEFERRED transaction (a read unit's, at its first statement)."""
        raw = self._checkout()
        try:
            raw.execute("BEGIN")
        except BaseException as error:
            self._end(raw, "ROLLBACK")
            self._checkin(raw, False)
            if isinstance(error, sqlite3.Error):
                raise sqlalchemy_error(error, "BEGIN") from error
            raise
        return raw

    @staticmethod
    def _begin(raw: sqlite3.Connection) -> None:
        """BEGIN (DEFERRED) on a read unit's connection at its second statement, the first
        having run alone; the unit's end gives the connection back (decision 0475)."""
        try:
            raw.execute("BEGIN")
        except sqlite3.Error as error:
            raise sqlalchemy_error(error, "BEGIN") from error

    async def _begin_immediate(self, raw: sqlite3.Connection) -> None:
        delay = FIRST_BACKOFF
        deadline: float | None = None
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise sqlalchemy_error(error, "BEGIN IMMEDIATE") from error
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.lock_timeout
                elif now >= deadline:
                    raise sqlalchemy_error(error, "BEGIN IMMEDIATE") from error
            await self.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)

    # --- units of work ------------------------------------------------------------------
    # Plain classes rather than generator-based context managers: three units per invoke, and
    # a generator's frame, its wrapper and a nested `bound` block cost more than the unit.

    def read(self) -> _ReadUnit:
        return _ReadUnit(self)

    def transaction(self) -> _WriteUnit:
        return _WriteUnit(self, Unit.TRANSACTION)

    def statement(self) -> _StatementUnit:
        return _StatementUnit(self)

    def _group(self) -> _Group:
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            with self._idle_lock:  # loops on other threads may add theirs at the same time
                group = self._groups.get(loop)
                if group is None:
                    group = self._groups[loop] = _Group(self)
        return group

    @staticmethod
    def _end(raw: sqlite3.Connection, sql: str) -> bool:
        """End the transaction (True: the connection is fit for reuse)."""
        if not raw.in_transaction:
            return True
        try:
            raw.execute(sql)
        except sqlite3.Error:
            return False
        return True

    def dispose_ended(self) -> None:
        """Close the idle connections (called by the sync `Database.dispose`)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for raw in idle:
            raw.close()

    async def close(self) -> None:
        with self._idle_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for raw in idle:
            raw.close()


class _ReadUnit:
    """`SqliteDatabase.read()`: one DEFERRED transaction, ended with a rollback. The
    connection goes back to the idle list when the block ended without an exception.

    The connection is taken and BEGIN sent at the unit's first statement: a DEFERRED
    transaction reads its snapshot at its first statement anyway, and a unit that reads
    nothing (a warm invoke's, decision 0400) then costs no connection and no round trip."""

    __slots__ = ("_conn", "_db", "_token")

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        token = begin_unit(db.observed, db._sync.ids, Unit.READ)
        self._token, self._conn = token, _Connection(db, None, Unit.READ)
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db, raw = self._db, self._conn._raw
        try:
            if raw is not None:
                healthy = db._end(raw, "ROLLBACK") and exc_type is None
                db._checkin(raw, healthy)
        finally:
            unbind(self._token)


class _WriteUnit:
    """`SqliteDatabase.transaction()` and `statement()`: BEGIN IMMEDIATE behind the loop's
    writer lock; COMMIT when the block ends (ROLLBACK when a money program in it was refused,
    or on an exception)."""

    __slots__ = ("_conn", "_db", "_lock", "_raw", "_token", "_told", "_unit")

    def __init__(self, db: SqliteDatabase, unit: Unit, *, told: bool = True) -> None:
        self._db = db
        self._unit = unit
        self._told = told

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        token = bind(db._sync.ids)
        try:
            if self._told and db.observed.listeners:
                db.observed.tell("unit", self._unit.value)
            lock = db._writer_lock()
            await lock.acquire()
            try:
                raw = db._checkout()
                try:
                    await db._begin_immediate(raw)
                except BaseException:
                    db._checkin(raw, not raw.in_transaction)
                    raise
            except BaseException:
                lock.release()
                raise
        except BaseException:
            unbind(token)
            raise
        self._lock, self._raw, self._token = lock, raw, token
        self._conn = _Connection(db, raw, self._unit)
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db, raw = self._db, self._raw
        healthy = True
        try:
            if exc_type is not None:
                healthy = db._end(raw, "ROLLBACK") and not raw.in_transaction
                return
            try:
                raw.execute("ROLLBACK" if self._conn.refused else "COMMIT")
            except sqlite3.Error as error:
                healthy = db._end(raw, "ROLLBACK") and not raw.in_transaction
                raise sqlalchemy_error(error, "COMMIT") from error
            except BaseException:
                healthy = not raw.in_transaction
                raise
        finally:
            try:
                db._checkin(raw, healthy)
            finally:
                self._lock.release()
                unbind(self._token)


GROUP_MAX = 32
"""At most this many money programs commit together (as on PostgreSQL)."""


class _Item:
    __slots__ = ("future", "program", "refusal", "values")

    def __init__(
        self,
        program: Runnable[ProgramStatement],
        values: dict[str, Any],
        future: asyncio.Future[Any],
        refusal: guarded.Refusal | None,
    ) -> None:
        self.program = program
        self.values = values
        self.future = future
        self.refusal = refusal


class _Group:
    """Group commit of one event loop's money programs on SQLite (decision 0455).

    SQLite has one writer. A write unit runs without a pause once it has the write lock, so
    on one loop writers only queue when the lock is away (another process holds it: `BEGIN
    IMMEDIATE` backs off with the loop's writer lock held); then each queued writer waited
    for a turn of the loop of its own, one transaction per turn, and 40-55 of a process's 64
    calls queued there. So the `statement()` units of a loop (the invoke's accept, settle and
    release) queue their program here, and one task runs the queue: under one `BEGIN
    IMMEDIATE`, at most `GROUP_MAX` programs one after another, each in a SAVEPOINT, and one
    COMMIT for all. Each caller gets its answer after that COMMIT.

    - A refused program (`guarded.Refused`) or one that failed with the transaction still
      open (a unique violation) is rolled back to its savepoint: it wrote nothing, its caller
      gets its error, and the others of the group go on, as they would have alone.
    - When an error ended the whole transaction, the programs already run lost their writes:
      they go back to the head of the queue with the rest; the failing one gets its error.
    - A COMMIT that fails fails every program of the group (each had been told so alone).
    - A program alone runs without a savepoint: its unit as before.
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._queue: collections.deque[_Item] = collections.deque()
        self._task: asyncio.Task[None] | None = None

    async def submit(
        self,
        program: Runnable[ProgramStatement],
        values: dict[str, Any],
        refusal: guarded.Refusal | None = None,
    ) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        item = _Item(program, values, loop.create_future(), refusal)
        self._queue.append(item)
        if self._task is None:
            self._task = loop.create_task(self._drain())
        result: dict[str, Any] | None = await item.future
        return result

    async def _drain(self) -> None:
        queue = self._queue
        try:
            while queue:
                await self._next()
        except BaseException as error:  # a bug here must not leave callers waiting
            fail_waiting(list(queue), error)
            queue.clear()
            if not isinstance(error, Exception):
                raise
        finally:
            self._task = None

    async def _next(self) -> None:
        """Take the write lock, then run the queue's next batch in one transaction."""
        db, queue = self._db, self._queue
        lock = db._writer_lock()
        await lock.acquire()
        try:
            raw = db._checkout()
            healthy = True  # unless running the batch went wrong
            try:
                await db._begin_immediate(raw)
                batch: list[_Item] = []
                while queue and len(batch) < GROUP_MAX:
                    item = queue.popleft()
                    if not item.future.done():  # its caller was cancelled before it ran
                        batch.append(item)
                healthy = False
                try:
                    healthy = self._together(raw, batch)
                except BaseException as error:
                    fail_waiting(batch, error)
                    raise
            finally:
                if raw.in_transaction:
                    healthy = db._end(raw, "ROLLBACK") and not raw.in_transaction and healthy
                db._checkin(raw, healthy)
        finally:
            lock.release()

    def _together(self, raw: sqlite3.Connection, batch: list[_Item]) -> bool:
        """Run `batch` in `raw`'s transaction and commit it (see the class); whether `raw` is
        fit for reuse."""
        db = self._db
        alone = len(batch) == 1
        ran: list[tuple[_Item, dict[str, Any] | None]] = []
        for index, item in enumerate(batch):
            if not alone:
                raw.execute("SAVEPOINT grouped")
            try:
                result = _run_program(db, raw, item.program, item.values, item.refusal)
            except Exception as error:
                if not raw.in_transaction:  # the whole transaction ended: none of it stands
                    fail_waiting([item], error)
                    self._queue.extendleft(reversed([done for done, _ in ran] + batch[index + 1 :]))
                    return True
                if alone:
                    raw.execute("ROLLBACK")
                else:
                    raw.execute("ROLLBACK TO grouped")
                    raw.execute("RELEASE grouped")
                fail_waiting([item], error)
                continue
            if not alone:
                raw.execute("RELEASE grouped")
            ran.append((item, result))
        if not raw.in_transaction:
            return True  # a program alone, refused and rolled back
        try:
            raw.execute("COMMIT")
        except sqlite3.Error as error:
            healthy = db._end(raw, "ROLLBACK") and not raw.in_transaction
            fail_waiting([item for item, _ in ran], sqlalchemy_error(error, "COMMIT"))
            return healthy
        for item, result in ran:
            if not item.future.done():
                item.future.set_result(result)
        return True


class _Grouped:
    """A `statement()` unit's connection on SQLite: its money program goes to the loop's
    `_Group`; any other single statement runs in a write transaction of its own."""

    __slots__ = ("_db", "_unit")

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._unit = OneUnit(Unit.STATEMENT)

    @property
    def refused(self) -> bool:
        return self._unit.refused

    async def execute(self, op: Op) -> Any:
        self._unit.check(op)
        db = self._db
        if type(op) is Run:
            program = db.program(op.program)
            try:
                return await db._group().submit(program, program.values(op.params), op.refusal)
            except BaseException:  # a refused or failed program aborts its unit (decision 0324)
                self._unit.refused = True
                raise
        async with _WriteUnit(db, Unit.TRANSACTION, told=False) as conn:
            return await conn.execute(op)


class _StatementUnit:
    """`SqliteDatabase.statement()`: one operation, committed on its own or with the loop's
    other money programs (`_Group`), before `execute` returns."""

    __slots__ = ("_db", "_token")

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def __aenter__(self) -> AsyncConnection:
        db = self._db
        # The program's fresh ids are drawn in the unit.
        self._token = begin_unit(db.observed, db._sync.ids, Unit.STATEMENT)
        return _Grouped(db)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        unbind(self._token)
