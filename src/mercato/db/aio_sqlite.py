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
from operator import itemgetter
from types import TracebackType
from typing import Any

from sqlalchemy import exc
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.cache_key import NO_CACHE
from sqlalchemy.sql.compiler import SQLCompiler

from mercato.core.ids import bind, new_id, unbind
from mercato.db import guarded
from mercato.db.aio import Observed, OneUnit, Unit, begin_unit, fail_waiting
from mercato.db.aio_reads import is_grouped
from mercato.db.aio_statements import Prepared, Statements, sqlalchemy_error
from mercato.db.plans import AsyncConnection, Op, Rows, Run
from mercato.db.uow import Database

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
FIRST_BACKOFF = 0.0005
MAX_BACKOFF = 0.02
_MAX_PROGRAMS = 256
WAL_AUTOCHECKPOINT_PAGES = 10_000
"""A commit on these connections checkpoints once the WAL holds this many pages (SQLite's
default is 1,000). An invoke writes about 44 WAL frames, most of them to the same few hot pages
(the caller's balances, its quota window, the tables' last leaves), and a checkpoint copies
each page once and syncs twice, on the loop: ten times fewer checkpoints copy far fewer pages
and sync 175 → 19 times per 1,300 invokes, for a WAL of at most about 40 MB (decision 0436)."""


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY


class _Bound:
    """A program's statement as `_Connection._run` sends it: its SQL and the keys of its
    values in `_Program.values`, in placeholder order, picked in one C call. The same facts
    as `Prepared.bind` (same values, same processors), in the shape of a program's values.

    A value is processed once per run and type: a program binds the same object (its `now`,
    a row's timestamps that are that `now`) in several places and steps, and a type's bind
    processor is a pure function of the value (SQLite's datetime formatting costs about
    2.5 µs a call)."""

    __slots__ = ("pick", "prepared", "processors", "sql")

    def __init__(
        self,
        prepared: Prepared,
        index: int,
        consts: dict[str, Any],
        makers: dict[str, Callable[[], Any]],
    ) -> None:
        self.prepared = prepared
        self.sql = prepared.sql
        keys: list[str] = []
        for key, value, required, make, _process in prepared._binds:
            if key.startswith("p_"):
                keys.append(key[2:])  # an input, kept by its own name (`_Program.values`)
            elif key.startswith("s_"):
                keys.append(key)  # a column an earlier step returned
            else:
                # The statement's own value (`param_1`, a default made per run), never among
                # a program's inputs: kept under a key no other statement shares.
                own = f"{index}:{key}"
                if make is not None:
                    makers[own] = make
                elif required:
                    raise exc.InvalidRequestError(
                        f"A value is required for bind parameter {key!r} (a program's inputs "
                        "are bound with Refs.param)"
                    )
                else:
                    consts[own] = value
                keys.append(own)
        self.pick: Callable[[Mapping[str, Any]], Any] = (
            itemgetter(*keys) if len(keys) > 1 else _pick_one(keys[0]) if keys else _pick_none
        )
        compiled = prepared.compiled
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        positions = compiled.positiontup or ()
        self.processors = tuple(
            (index, process, _type_key(by_name[positions[index]].type))
            for index, process in prepared._bind_processors
        )
        """(position, processor, the type's cache key: None when it has none)."""

    def values(self, values: Mapping[str, Any], done: dict[Any, Any]) -> Sequence[Any]:
        """The values to send, `done` holding the values this run processed already."""
        picked = self.pick(values)
        if not self.processors:
            return picked  # type: ignore[no-any-return]
        out = list(picked)
        for index, process, kind in self.processors:
            value = out[index]
            if kind is None:
                out[index] = process(value)
                continue
            # By the value's identity: `done` holds the value too, so no other object can
            # take its id before the run ends.
            key = (kind, id(value))
            found = done.get(key)
            if found is None:
                found = done[key] = (value, process(value))
            out[index] = found[1]
        return out


def _type_key(type_: Any) -> Any:
    """A key equal for equal types (SQLAlchemy's own cache key of a type), or None."""
    key = type_._static_cache_key
    return None if key is NO_CACHE else key


def _pick_one(key: str) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    return lambda values: (values[key],)


def _pick_none(_values: Mapping[str, Any]) -> tuple[Any, ...]:
    return ()


class _Step:
    """One step of a guarded program, compiled for sqlite3 once (`_program`)."""

    __slots__ = (
        "code",
        "counted",
        "detail",
        "empty",
        "known",
        "names",
        "read",
        "required_if",
        "statement",
    )

    def __init__(
        self,
        item: guarded.CompiledStep,
        prepare: Callable[[Any], Prepared],
        index: int,
        consts: dict[str, Any],
        makers: dict[str, Callable[[], Any]],
    ) -> None:
        step = item.step

        def bound(clause: Any, n: int) -> _Bound | None:
            return None if clause is None else _Bound(prepare(clause), n, consts, makers)

        statement = bound(item.statement, 4 * index)
        assert statement is not None
        self.statement = statement
        self.required_if = bound(item.required_if, 4 * index + 1)
        self.detail = bound(item.detail, 4 * index + 2)
        self.read = bound(item.read, 4 * index + 3)
        self.counted = item.counted
        """Whether the statement's row count says if the step wrote (`CompiledStep.counted`)."""
        known = tuple(key[2:] if key.startswith("p_") else key for key in item.known)
        self.known: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            itemgetter(*known) if len(known) > 1 else _pick_one(known[0]) if known else _pick_none
        )
        """A counted step's row without `read`: the values it inserted, from a run's values."""
        self.empty = step.empty
        self.code = step.code
        self.names = tuple(f"s_{step.name}_{column}" for column in item.columns)
        """The bind names of the columns it returns, for the steps after it."""


class _Program:
    """A guarded program's steps compiled for sqlite3, with how its outputs are read back.

    Its values are one dict per run (`values`): the inputs by their own names (a statement's
    `p_<name>`), the statements' literals (`<n>:<name>`), then each step's columns as
    `s_<step>_<column>`, each set before a later step reads it (so an input of that name,
    had a caller passed one, is never read)."""

    __slots__ = (
        "built",
        "consts",
        "fresh",
        "makers",
        "outputs",
        "pick_outputs",
        "program",
        "steps",
    )

    def __init__(
        self, program: guarded.Program, built: guarded.Compiled, prepare: Callable[[Any], Prepared]
    ) -> None:
        self.program = program
        self.built = built
        self.consts: dict[str, Any] = {}
        self.makers: dict[str, Callable[[], Any]] = {}
        self.steps = tuple(
            _Step(item, prepare, index, self.consts, self.makers)
            for index, item in enumerate(built.steps)
        )
        self.fresh = tuple((name[2:], prefix) for name, prefix in built.fresh)
        self.outputs = built.outputs
        keys = tuple("s_" + name.replace(".", "_", 1) for name in built.outputs)
        self.pick_outputs: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            itemgetter(*keys) if len(keys) > 1 else _pick_one(keys[0]) if keys else _pick_none
        )
        """The outputs' values from a run's values, in `outputs` order."""

    def values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`aio.program_values` in this program's shape: a fresh id (from the bound ids) for
        each `Compiled.fresh` input not given."""
        values = dict(params)
        values.update(self.consts)  # after the inputs: no input can replace a literal
        for name, make in self.makers.items():
            values[name] = make()
        for name, prefix in self.fresh:
            if name not in values:
                values[name] = new_id(prefix)
        return values


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
            except guarded.Refused:
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
        prepared, extracted = self._db.statements.prepare(statement, params)
        if params is not None and type(params) is not dict and not isinstance(params, Mapping):
            return self._many(prepared, extracted, params)
        sql, values = prepared.bind(params, extracted)
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

    def _many(
        self, prepared: Any, extracted: Any, params: Sequence[Mapping[str, Any]]
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        if self._db.observed.listeners:
            self._db.observed.tell("sql", prepared.sql)
        assert self._raw is not None
        if prepared.dml_without_rows and not prepared.expanding and extracted is None:
            bound_values = [prepared.bind(one)[1] for one in params]
            try:
                self._raw.executemany(prepared.sql, bound_values)
            except sqlite3.Error as error:
                raise sqlalchemy_error(error, prepared.sql) from error
            return rows
        for one in params:
            sql, values = prepared.bind(one, extracted)
            try:
                raw = self._raw.execute(sql, values).fetchall()
            except sqlite3.Error as error:
                raise sqlalchemy_error(error, sql) from error
            rows.extend(prepared.row(row) for row in raw)
        return rows

    def _run(self, op: Run) -> dict[str, Any] | None:
        program = self._db.program(op.program)
        assert self._raw is not None
        return _run_program(self._db, self._raw, program, program.values(op.params))


def _run_program(
    db: SqliteDatabase, raw: sqlite3.Connection, program: _Program, values: dict[str, Any]
) -> dict[str, Any] | None:
    """`guarded._run_steps`: the program's steps one after another in `raw`'s transaction,
    each compiled once as the sync side compiles it (`guarded.Compiled.sql`); a counted step
    (no RETURNING, decision 0490) is empty when its write changed no row. A rerun with
    the same `values` reads what it read the first time: a step's columns are set before any
    later step reads them."""
    done: dict[Any, Any] = {}
    for step in program.steps:
        row: tuple[Any, ...] | None
        if not step.counted:
            row = _first(db, raw, step.statement, values, done)
        elif _count(db, raw, step.statement, values, done) <= 0:
            row = None
        elif step.read is not None:
            row = _first(db, raw, step.read, values, done)
            if row is None:  # the row it wrote, by a unique key: never missing
                raise AssertionError(f"{step.read.sql}: the row written is missing")
        else:
            row = step.known(values)
        if row is not None:
            values.update(zip(step.names, row, strict=True))
            continue
        if step.empty is guarded.Empty.STOP:
            return None
        if step.empty is guarded.Empty.REFUSE:
            required = True
            if step.required_if is not None:
                found = _first(db, raw, step.required_if, values, done)
                required = bool(found[0]) if found is not None else False
            if required:
                detail: tuple[Any, ...] = ()
                if step.detail is not None:
                    detail = _first(db, raw, step.detail, values, done) or ()
                raise guarded.Refused(
                    step.code, tuple(None if v is None else str(v) for v in detail)
                )
        for name in step.names:
            values[name] = None
    return dict(zip(program.outputs, program.pick_outputs(values), strict=True))


def _count(
    db: SqliteDatabase,
    raw: sqlite3.Connection,
    bound: _Bound,
    values: Mapping[str, Any],
    done: dict[Any, Any],
) -> int:
    """The rows a counted step's write (no RETURNING) changed, for a program's `values`."""
    sql = bound.sql
    if db.observed.listeners:
        db.observed.tell("sql", sql)
    try:
        return raw.execute(sql, bound.values(values, done)).rowcount
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, sql) from error


def _first(
    db: SqliteDatabase,
    raw: sqlite3.Connection,
    bound: _Bound,
    values: Mapping[str, Any],
    done: dict[Any, Any],
) -> tuple[Any, ...] | None:
    """The first row `bound` returns for a program's `values` (result processors applied, as
    `_Connection._rows` applies them)."""
    sql = bound.sql
    if db.observed.listeners:
        db.observed.tell("sql", sql)
    try:
        found = raw.execute(sql, bound.values(values, done)).fetchone()
    except sqlite3.Error as error:
        raise sqlalchemy_error(error, sql) from error
    return None if found is None else bound.prepared.row(found)


class SqliteDatabase:
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
        self._programs: dict[int, _Program] = {}

    def program(self, program: guarded.Program) -> _Program:
        """`program`'s steps compiled for this database, once."""
        found = self._programs.get(id(program))
        if found is None or found.program is not program:
            if len(self._programs) >= _MAX_PROGRAMS:  # programs built per call (tests)
                self._programs.clear()
            found = _Program(program, guarded.compiled(program, "sqlite"), self._compile)
            self._programs[id(program)] = found
        return found

    def _compile(self, clause: Any) -> Prepared:
        compiled = clause.compile(dialect=self.statements.dialect)
        assert isinstance(compiled, SQLCompiler)
        return Prepared(compiled, self.statements.dialect)

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
    __slots__ = ("future", "program", "values")

    def __init__(
        self, program: _Program, values: dict[str, Any], future: asyncio.Future[Any]
    ) -> None:
        self.program = program
        self.values = values
        self.future = future


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

    async def submit(self, program: _Program, values: dict[str, Any]) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        item = _Item(program, values, loop.create_future())
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
                result = _run_program(db, raw, item.program, item.values)
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
                return await db._group().submit(program, program.values(op.params))
            except guarded.Refused:
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
