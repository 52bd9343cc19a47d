"""Reads that wait together go together: one round trip for the concurrent replays of a loop
(PostgreSQL, issue 20, decision 0450).

A replay is one read statement (decision 0420), and under load most of its PostgreSQL cost is
the round trip, not the statement: per replay the backend woke up, parsed a Bind, Execute and
Sync, ran the plan and answered, and serve's asyncpg wrote one message and read one answer.
So a statement marked `grouped` is not sent at once from a read unit's connection: the loop
collects every such read that is asked for before it next runs its callbacks, and the first of
them sends them all as ONE asyncpg `fetchmany` (every execution's Bind and Execute, then one
Sync) on its own connection, which its unit holds for it, then answers the others. No
connection is taken from the pool for it (a read unit waiting for a second connection while
holding one could wait for ever) and no task is made. Each execution echoes its place in the
batch (`SLOT`, a column the statement reads back from its own parameter), so its rows go to its
reader whatever they are: none, one or several, and the same parameters twice are two reads.

What a reader gets is what its statement alone would have read at some instant after it asked:
the executions run in autocommit, one after another, each under its own snapshot (READ
COMMITTED takes one per statement), in one implicit transaction that writes nothing. A reader
alone in its batch runs its statement as before. When the batch fails for any reason (the
server's error, the connection broken), each reader runs its statement again alone, on its own
connection, and gets its own answer or error, exactly as without grouping; a reader cancelled
before its batch ran is left out of it, and one cancelled after it was handed the batch but
before it sent it hands the batch to the next reader. Only read units group (a statement in a
transaction runs on its own connection, inside its transaction: `aio_postgres`).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import asyncpg
from sqlalchemy import Integer, Select, bindparam

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


class _Lead:
    """What the first reader of a batch is handed: the batch's reads (itself first), which it
    reads on its own connection (one of them: alone, as without grouping)."""

    __slots__ = ("prepared", "reads")

    def __init__(self, prepared: Prepared, reads: list[_Read]) -> None:
        self.prepared = prepared
        self.reads = reads


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
    """The grouped reads of one event loop (see the module docstring).

    No task of its own: when the loop next runs its callbacks (`_flush`), the first reader of
    each batch still waiting is handed the batch (`_Lead`) and reads it in its own coroutine,
    on its own connection, then answers the others. A leader that cannot (its read failed, it
    was cancelled) hands each other reader a batch of its own: each reads alone."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[str, tuple[Prepared, list[_Read]]] = {}
        self.batches = 0
        """How many round trips went with more than one read (for tests)."""

    async def fetch(self, conn: Any, prepared: Prepared, values: list[Any]) -> list[Any]:
        """The rows (processed, `Prepared.row`) of `prepared` with `values`, read on `conn`
        (asyncpg, idle in autocommit: its unit waits for this) or with other reads."""
        read = _Read(conn, values, self._loop.create_future())
        waiting = self._waiting
        if not waiting:
            self._loop.call_soon(self._flush)
        entry = waiting.get(prepared.sql)
        if entry is None:
            entry = waiting[prepared.sql] = (prepared, [])
        entry[1].append(read)
        try:
            outcome = await read.future
        except asyncio.CancelledError:
            future = read.future
            if future.done() and not future.cancelled():  # it was handed a batch: pass it on
                _hand_over(future.result(), read, alone=False)
            raise
        if isinstance(outcome, _Lead):
            return await self._lead(outcome, read)
        rows: list[Any] = outcome
        return rows

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for prepared, reads in waiting.values():
            for start in range(0, len(reads), GROUP_MAX):
                live = [r for r in reads[start : start + GROUP_MAX] if not r.future.done()]
                if live:  # a reader cancelled before now is left out
                    live[0].future.set_result(_Lead(prepared, live))

    async def _lead(self, lead: _Lead, read: _Read) -> list[Any]:
        prepared, reads = lead.prepared, lead.reads
        if len(reads) == 1:
            return await _alone(prepared, read)
        slot = _slot_position(prepared)
        args = []
        for index, one in enumerate(reads):
            values = list(one.values)
            values[slot] = index
            args.append(values)
        try:
            records = await read.conn.fetchmany(prepared.sql, args)
        except Exception:  # nothing was written: each reads again alone, this one too
            _hand_over(lead, read, alone=True)
            return await _alone(prepared, read)
        except BaseException:  # cancelled: its unit discards the connection
            _hand_over(lead, read, alone=True)
            raise
        self.batches += 1
        row = prepared.row
        rows: list[list[Any]] = [[] for _ in reads]
        for record in records:
            rows[record[-1]].append(row(record))
        for one, found in zip(reads[1:], rows[1:], strict=True):
            if not one.future.done():
                one.future.set_result(found)
        return rows[0]


def _hand_over(lead: _Lead, read: _Read, *, alone: bool) -> None:
    """The batch `read` led, minus `read`, to its other readers: each alone (the batch's
    read failed), or together, led by the next (`read` was cancelled before leading)."""
    others = [one for one in lead.reads if one is not read and not one.future.done()]
    if not others:
        return
    if alone:
        for one in others:
            one.future.set_result(_Lead(lead.prepared, [one]))
    else:
        others[0].future.set_result(_Lead(lead.prepared, others))


_SLOTS: weakref.WeakKeyDictionary[Prepared, int] = weakref.WeakKeyDictionary()


def _slot_position(prepared: Prepared) -> int:
    position = _SLOTS.get(prepared)
    if position is None:
        positions = prepared.compiled.positiontup or ()
        position = _SLOTS[prepared] = list(positions).index(SLOT)
    return position


async def _alone(prepared: Prepared, read: _Read) -> list[Any]:
    """`read` on its own connection, as a read unit runs any statement (the driver's errors
    in SQLAlchemy's form)."""
    sql = prepared.sql
    try:
        records = await read.conn.fetch(sql, *read.values)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
        raise sqlalchemy_error(error, sql) from error
    row = prepared.row
    return [row(record) for record in records]
