"""Reads that wait together go together: one round trip for the concurrent replays of a loop
(PostgreSQL, issue 20, decision 0450).

A replay is one read statement (decision 0420), and under load most of its PostgreSQL cost is
the round trip, not the statement: per replay the backend woke up, parsed a Bind, Execute and
Sync, ran the plan and answered, and serve's asyncpg wrote one message and read one answer.
So a statement marked `grouped` is not sent at once from a read unit's connection: the loop
collects every such read that is asked for before it next runs its callbacks, and one task
sends them as ONE asyncpg `fetchmany` (every execution's Bind and Execute, then one Sync) on the
connection of the first of them, whose unit is waiting for the answer and uses it for nothing
else meanwhile. No connection is taken from the pool for it (a read unit waiting for a second
connection while holding one could wait for ever). Each execution echoes its place in the batch
(`SLOT`, a column the statement reads back from its own parameter), so its rows go to its
reader whatever they are: none, one or several, and the same parameters twice are two reads.

What a reader gets is what its statement alone would have read at some instant after it asked:
the executions run in autocommit, one after another, each under its own snapshot (READ
COMMITTED takes one per statement), in one implicit transaction that writes nothing. A reader
alone in its batch runs its statement as before. When the batch fails for any reason (the
server's error, the connection broken because the first reader was cancelled and its unit
discarded the connection), each reader runs its statement again alone, on its own connection,
and gets its own answer or error, exactly as without grouping; a reader cancelled before its
batch ran is left out of it. Only read units group: a statement in a transaction runs on its
own connection, inside its transaction (`aio_postgres`).

Two other shapes were measured and dropped (decision 0450): the first reader sending the batch
itself, in its own coroutine (no task: serve's CPU per replay 157-175 against 133-158 µs this
way, alternated), and at most one or two batches in flight with the reads that arrive meanwhile
waiting for one to end (serve's CPU no better than without grouping).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import asyncpg
from sqlalchemy import Integer, Select, bindparam

from mercato.db.aio import fail_waiting
from mercato.db.aio_statements import Prepared, sqlalchemy_error

GROUPED = "mercato_grouped_read"
"""The execution option that marks a statement whose reads may go together (`grouped`)."""
SLOT = "read_slot"
"""The parameter, and the last column, of a grouped statement: the reader's place in its batch
(any integer when the statement runs alone, as on SQLite or a sync Session)."""
GROUP_MAX = 64
"""At most this many reads in one round trip."""


def grouped(statement: Select[Any]) -> Select[Any]:
    """`statement` with one more, last, column, the `SLOT` parameter it is given, and marked so
    that its reads in PostgreSQL read units may go together. Its callers give `SLOT` (0) and
    read the rows without their last column."""
    slot = bindparam(SLOT, type_=Integer)
    return statement.add_columns(slot.label(SLOT)).execution_options(**{GROUPED: True})


def is_grouped(statement: Any) -> bool:
    options = getattr(statement, "_execution_options", None)
    return bool(options and options.get(GROUPED))


class _Read:
    __slots__ = ("conn", "future", "values")

    def __init__(self, conn: Any, values: list[Any], future: asyncio.Future[Any]) -> None:
        self.conn = conn
        self.values = values
        self.future = future


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
        self._waiting: dict[str, tuple[Prepared, list[_Read]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        """How many round trips went with more than one read (for tests)."""

    async def fetch(self, conn: Any, prepared: Prepared, values: list[Any]) -> list[Any]:
        """The rows (processed, `Prepared.row`) of `prepared` with `values`, read on `conn`
        (asyncpg, idle in autocommit: its unit waits for this) or with other reads."""
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        if not self._waiting:
            self._loop.call_soon(self._flush)
        entry = self._waiting.get(prepared.sql)
        if entry is None:
            entry = self._waiting[prepared.sql] = (prepared, [])
        entry[1].append(_Read(conn, values, future))
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
        slot = _slot_position(prepared)
        args = []
        for index, read in enumerate(live):
            values = list(read.values)
            values[slot] = index
            args.append(values)
        try:
            records = await live[0].conn.fetchmany(prepared.sql, args)
        except Exception:  # nothing was written: each reads again alone (see the module)
            for read in live:
                await _alone(prepared, read)
            return
        except BaseException as error:  # this task itself cancelled: the loop is ending
            fail_waiting(live, error)
            raise
        self.batches += 1
        rows: list[list[Any]] = [[] for _ in live]
        row = prepared.row
        for record in records:
            rows[record[-1]].append(row(record))
        for read, found in zip(live, rows, strict=True):
            if not read.future.done():
                read.future.set_result(found)


_SLOTS: weakref.WeakKeyDictionary[Prepared, int] = weakref.WeakKeyDictionary()


def _slot_position(prepared: Prepared) -> int:
    position = _SLOTS.get(prepared)
    if position is None:
        positions = prepared.compiled.positiontup or ()
        position = _SLOTS[prepared] = list(positions).index(SLOT)
    return position


async def _alone(prepared: Prepared, read: _Read) -> None:
    """One read on its own connection, as a read unit runs any statement."""
    if read.future.done():
        return
    try:
        records = await read.conn.fetch(prepared.sql, *read.values)
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
