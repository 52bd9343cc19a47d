"""Reads that wait together go together: one round trip for the concurrent replays of a loop
(PostgreSQL, issue 20, decision 0450).

A replay is one read statement (decision 0420), and under load most of its PostgreSQL cost is
the round trip, not the statement: per replay the backend woke up, parsed a Bind, Execute and
Sync, ran the plan and answered, and serve's asyncpg wrote one message and read one answer.
So a read of a statement marked `grouped` goes at once, alone, as without grouping, while
fewer than `LANES` of its round trips are in flight in the loop (nothing is added at low load);
the reads asked for while all are wait for one to end, and then go together: the first of them
sends them all as ONE asyncpg `fetchmany` (every execution's Bind and Execute, then one Sync)
on its own connection, which its unit holds for it, and answers the others. Under load a batch
is whatever arrived during a round trip. No connection is taken
from the pool for it (a read unit waiting for a second connection while holding one could wait
for ever) and no task is made. Each execution echoes its place in the batch (`SLOT`, a column
the statement reads back from its own parameter), so its rows go to its reader whatever they
are: none, one or several, and the same parameters twice are two reads.

What a reader gets is what its statement alone would have read at some instant after it asked:
the executions run in autocommit, one after another, each under its own snapshot (READ
COMMITTED takes one per statement), in one implicit transaction that writes nothing. When a
batch fails for any reason (the server's error, the connection broken), each of its readers
runs its statement again alone, on its own connection, and gets its own answer or error,
exactly as without grouping; a reader cancelled while waiting is left out of its batch, and
one cancelled after it was made the next batch's leader, before it sent it, passes the lead
on. Only read units group (a statement in a transaction runs on its own connection, inside
its transaction: `aio_postgres`).
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
LANES = 2
"""At most this many round trips of one statement in flight per loop before reads wait to go
together (measured: decision 0450)."""


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

    def __init__(self, conn: Any, values: list[Any], future: asyncio.Future[Any] | None) -> None:
        self.conn = conn
        self.values = values
        self.future = future
        """None for a read that went at once (nobody answers it but itself)."""


class _Lead:
    """What the first reader of the next batch is handed: the batch's reads (itself first)."""

    __slots__ = ("reads",)

    def __init__(self, reads: list[_Read]) -> None:
        self.reads = reads


_ALONE = object()
"""What a reader of a failed batch is told: read alone, on your own connection."""

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
    """The grouped reads of one event loop (see the module docstring): at most `LANES` round
    trips of a statement in flight; the reads asked for while all are go in the next batch,
    led by the first of them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lanes: dict[str, int] = {}
        """Per SQL text: how many of its round trips are in flight (absent: none)."""
        self._waiting: dict[str, list[_Read]] = {}
        """Per SQL text: the reads waiting for a round trip to end."""
        self.batches = 0
        """How many round trips went with more than one read (for tests)."""

    async def fetch(self, conn: Any, prepared: Prepared, values: list[Any]) -> list[Any]:
        """The rows (processed, `Prepared.row`) of `prepared` with `values`, read on `conn`
        (asyncpg, idle in autocommit: its unit waits for this) or with other reads."""
        sql = prepared.sql
        lanes = self._lanes.get(sql, 0)
        if lanes < LANES:  # a lane is free: this read goes now
            self._lanes[sql] = lanes + 1
            return await self._lead(prepared, [_Read(conn, values, None)])
        future: asyncio.Future[Any] = self._loop.create_future()
        read = _Read(conn, values, future)
        self._waiting.setdefault(sql, []).append(read)
        try:
            outcome = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                outcome = future.result()
                if isinstance(outcome, _Lead):  # made leader, never sent: pass the lead on
                    self._next(prepared, outcome.reads[1:])
            raise
        if outcome is _ALONE:
            return await _alone(prepared, read)
        if isinstance(outcome, _Lead):
            return await self._lead(prepared, outcome.reads)
        rows: list[Any] = outcome
        return rows

    async def _lead(self, prepared: Prepared, reads: list[_Read]) -> list[Any]:
        """Send `reads` (the leader's first) and answer the others; then hand the reads that
        are waiting by now to the next leader, whatever happened (its lane goes on)."""
        try:
            if len(reads) == 1:
                return await _alone(prepared, reads[0])
            return await self._together(prepared, reads)
        finally:
            self._next(prepared, [])

    def _next(self, prepared: Prepared, first: list[_Read]) -> None:
        """The lane that ended a round trip (or whose leader was cancelled before it sent its
        batch) to the next batch: at most `GROUP_MAX` of the reads still waiting, `first`
        before the others, handed to its first reader; freed when none is waiting."""
        sql = prepared.sql
        waiting = self._waiting.pop(sql, ())
        live = [one for one in (*first, *waiting) if not _future(one).done()]
        if not live:
            lanes = self._lanes[sql] - 1
            if lanes:
                self._lanes[sql] = lanes
            else:
                del self._lanes[sql]
            return
        if len(live) > GROUP_MAX:
            self._waiting[sql] = live[GROUP_MAX:]
        batch = live[:GROUP_MAX]
        _future(batch[0]).set_result(_Lead(batch))

    async def _together(self, prepared: Prepared, reads: list[_Read]) -> list[Any]:
        slot = _slot_position(prepared)
        args = []
        for index, one in enumerate(reads):
            values = list(one.values)
            values[slot] = index
            args.append(values)
        leader = reads[0]
        try:
            records = await leader.conn.fetchmany(prepared.sql, args)
        except Exception:  # nothing was written: each reads again alone, this one too
            _each_alone(reads[1:])
            return await _alone(prepared, leader)
        except BaseException:  # cancelled: its unit discards the connection
            _each_alone(reads[1:])
            raise
        self.batches += 1
        row = prepared.row
        rows: list[list[Any]] = [[] for _ in reads]
        for record in records:
            rows[record[-1]].append(row(record))
        for one, found in zip(reads[1:], rows[1:], strict=True):
            future = _future(one)
            if not future.done():
                future.set_result(found)
        return rows[0]


def _future(read: _Read) -> asyncio.Future[Any]:
    assert read.future is not None  # a read that waits has one
    return read.future


def _each_alone(reads: list[_Read]) -> None:
    for one in reads:
        future = _future(one)
        if not future.done():
            future.set_result(_ALONE)


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
