"""Reads that wait together go together: one round trip for the concurrent replays of a loop
(PostgreSQL, issue 20, decisions 0450 and 0501).

A replay is one read statement (decision 0420), and under load most of its PostgreSQL cost is
the round trip, not the statement: per replay the backend woke up, parsed a Bind, Execute and
Sync, ran the plan and answered, and serve's asyncpg wrote one message and read one answer.
So a statement marked `grouped` is not sent at once from a read unit: the loop collects every
such read that is asked for before it next runs its callbacks, and one task sends them as ONE
asyncpg `fetchmany` (every execution's Bind and Execute, then one Sync). Each execution echoes
its place in the batch (`SLOT`, a column `with_slot` adds, read back from its own parameter),
so its rows go to its reader whatever they are: none, one or several, and the same parameters
twice are two reads. Reads go together only with reads of the same pool (the same database).

Which connection a batch runs on (decision 0501): a read unit takes a connection at its first
statement (decision 0461), except when that statement is a grouped read: it then holds none,
and its read goes to the batch without one (a replay's read unit never takes a connection: no
pool slot, no wait for one, nothing to give back). A batch runs on the connection of the first
of its readers that holds one (whose unit waits for the answer and uses it for nothing else
meanwhile), else on a connection the batch takes from the pool for its round trip and gives
back. That cannot wait for ever: a unit that holds a connection and reads grouped is a holder
in its own batch, so a batch that takes one never waits on a unit that waits on it.

What a reader gets is what its statement alone would have read at some instant after it asked:
the executions run in autocommit, one after another, each under its own snapshot (READ
COMMITTED takes one per statement), in one implicit transaction that writes nothing. A reader
alone in its batch runs its statement alone (on its own connection, or on one taken for it).
When the batch fails for any reason (the server's error, the connection broken because the
reader holding it was cancelled and its unit discarded the connection, no connection to be
had), each reader runs its statement again alone, on its own connection (one taken for it when
it holds none), and gets its own answer or error, exactly as without grouping; a reader
cancelled before its batch ran is left out of it. Only read units group: a statement in a
transaction runs on its own connection, inside its transaction (`aio_postgres`).

Two other shapes were measured and dropped (decision 0450): the first reader sending the batch
itself, in its own coroutine (no task: serve's CPU per replay 157-175 against 133-158 µs this
way, alternated), and at most one or two batches in flight with the reads that arrive meanwhile
waiting for one to end (serve's CPU no better than without grouping).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import asyncpg
from sqlalchemy import Integer, Select, bindparam

from mercato.db.aio import fail_waiting
from mercato.db.aio_statements import Prepared, sqlalchemy_error

GROUPED = "mercato_grouped_read"
"""The execution option that marks a statement whose reads may go together (`grouped`)."""
SLOT = "read_slot"
"""The parameter, and the last column, of a grouped statement as a batch sends it
(`with_slot`): the reader's place in its batch."""
GROUP_MAX = 64
"""At most this many reads in one round trip."""

T = TypeVar("T")


def grouped(statement: Select[Any]) -> Select[Any]:
    """`statement` marked (an execution option) so that its reads in PostgreSQL read units may
    go together. Its callers run it as any other statement and read the same rows."""
    return statement.execution_options(**{GROUPED: True})


def is_grouped(statement: Any) -> bool:
    get = getattr(statement, "get_execution_options", None)
    return get is not None and bool(get().get(GROUPED))


_SLOTTED: weakref.WeakKeyDictionary[Any, Select[Any]] = weakref.WeakKeyDictionary()


def with_slot(statement: Select[Any]) -> Select[Any]:
    """What a batch sends for a grouped `statement`: the same with one more, last, column,
    the `SLOT` parameter (the reader's place in its batch), made once per statement. Its
    readers give `SLOT` and get the rows without their last column (`aio_postgres`)."""
    found = _SLOTTED.get(statement)
    if found is None:
        slot = bindparam(SLOT, type_=Integer)
        found = _SLOTTED[statement] = statement.add_columns(slot.label(SLOT))
    return found


class _Read:
    __slots__ = ("conn", "future", "pool", "values")

    def __init__(
        self, conn: Any, values: list[Any], future: asyncio.Future[Any], pool: Pool | None
    ) -> None:
        self.conn = conn
        """The reader's own connection, or None (its unit holds none: decision 0501)."""
        self.values = values
        self.future = future
        self.pool = pool
        """Where a connection is taken for a reader that holds none."""


class Pool(Protocol):
    """What a batch needs of the loop's pool (`aio_postgres._Pool`)."""

    async def acquire(self) -> Any: ...

    def release(self, conn: Any, healthy: bool) -> None: ...

    async def alone(self, work: Callable[[Any], Awaitable[T]]) -> T: ...


_GROUPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadGroup] = (
    weakref.WeakKeyDictionary()
)


def read_group() -> ReadGroup:
    """The running loop's `ReadGroup`."""
    loop = asyncio.get_running_loop()
    group = _GROUPS.get(loop)
    if group is None:
        group = _GROUPS[loop] = ReadGroup(loop)
    return group


class ReadGroup:
    """The grouped reads of one event loop (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[tuple[Pool | None, str], tuple[Prepared, list[_Read]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        """How many round trips went with more than one read (for tests)."""

    async def fetch(
        self, conn: Any, prepared: Prepared, values: list[Any], pool: Pool | None = None
    ) -> list[Any]:
        """The rows (processed, `Prepared.row`) of `prepared` with `values`, read with other
        reads of `pool`: on `conn` (asyncpg, idle in autocommit: its unit waits for this) or,
        when it is None, on a connection of the batch's (taken from `pool`, which is then
        required)."""
        if conn is None and pool is None:
            raise ValueError("a reader without a connection needs the pool to take one from")
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        if not self._waiting:
            self._loop.call_soon(self._flush)
        key = (pool, prepared.sql)
        entry = self._waiting.get(key)
        if entry is None:
            entry = self._waiting[key] = (prepared, [])
        entry[1].append(_Read(conn, values, future, pool))
        return await future

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for prepared, reads in waiting.values():
            for start in range(0, len(reads), GROUP_MAX):
                task = self._loop.create_task(self._run(prepared, reads[start : start + GROUP_MAX]))
                self._tasks.add(task)  # kept until done (the loop holds tasks weakly)
                task.add_done_callback(self._tasks.discard)

    async def _run(self, prepared: Prepared, reads: list[_Read]) -> None:
        live = [read for read in reads if not read.future.done()]  # a cancelled reader: gone
        if len(live) == 1:
            await _alone(prepared, live[0])
            return
        if not live:
            return
        try:
            together = await self._together(prepared, live)
        except BaseException as error:  # this task itself cancelled: the loop is ending
            fail_waiting(live, error)
            raise
        if not together:  # nothing was written: each reads again alone (see the module)
            for read in live:
                await _alone(prepared, read)

    async def _together(self, prepared: Prepared, live: list[_Read]) -> bool:
        """Read `live` in one round trip, on a reader's connection or else on one taken for
        the batch (given back before this returns); False when that failed (no answer given)."""
        for read in live:
            if read.conn is not None:
                return await self._fetch(prepared, live, read.conn)
        pool = live[0].pool
        assert pool is not None  # `fetch` refuses a reader with neither
        try:
            conn = await pool.acquire()
        except Exception:  # no connection to be had: each tries alone, for its own error
            return False
        healthy = False
        try:
            together = await self._fetch(prepared, live, conn)
            healthy = True  # an error of the server leaves an autocommit connection fit
            return together
        finally:
            pool.release(conn, healthy)

    async def _fetch(self, prepared: Prepared, live: list[_Read], conn: Any) -> bool:
        slot = _slot_position(prepared)
        args = []
        for index, read in enumerate(live):
            values = list(read.values)
            values[slot] = index
            args.append(values)
        try:
            records = await conn.fetchmany(prepared.sql, args)
        except Exception:
            return False
        self.batches += 1
        rows: list[list[Any]] = [[] for _ in live]
        row = prepared.row
        for record in records:
            rows[record[-1]].append(row(record))
        for read, found in zip(live, rows, strict=True):
            if not read.future.done():
                read.future.set_result(found)
        return True


_SLOTS: weakref.WeakKeyDictionary[Prepared, int] = weakref.WeakKeyDictionary()


def _slot_position(prepared: Prepared) -> int:
    position = _SLOTS.get(prepared)
    if position is None:
        positions = prepared.compiled.positiontup or ()
        position = _SLOTS[prepared] = list(positions).index(SLOT)
    return position


async def _alone(prepared: Prepared, read: _Read) -> None:
    """One read on its own connection (one taken for it when it holds none), as a read unit
    runs any statement."""
    if read.future.done():
        return
    try:
        if read.conn is not None:
            records = await read.conn.fetch(prepared.sql, *read.values)
        else:
            assert read.pool is not None  # `fetch` refuses a reader with neither
            sql, values = prepared.sql, read.values
            records = await read.pool.alone(lambda conn: conn.fetch(sql, *values))
    except Exception as error:
        fail_waiting([read], _driver_error(error, prepared.sql))
        return
    except BaseException as error:
        fail_waiting([read], error)
        raise
    if not read.future.done():
        row = prepared.row
        read.future.set_result([row(record) for record in records])


def _driver_error(error: Exception, sql: str) -> Exception:
    """The driver's error as a read unit raises it (SQLAlchemy's form); any other as is."""
    if isinstance(error, asyncpg.PostgresError | asyncpg.InterfaceError | OSError):
        return sqlalchemy_error(error, sql)
    return error
