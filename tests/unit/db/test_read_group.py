"""`ReadGroup` when a batch fails (decision 0450): nothing was written, so each reader reads
again alone on its own connection and gets its own answer or its own error, as without
grouping; a reader cancelled before its batch ran is left out of it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Integer, bindparam, select
from sqlalchemy.exc import DBAPIError

from mercato.db.aio_postgres import asyncpg_dialect
from mercato.db.aio_reads import SLOT, grouped, read_group, with_slot
from mercato.db.aio_statements import Statements

_STATEMENT = with_slot(grouped(select(bindparam("n", type_=Integer))))


class _Conn:
    """An asyncpg connection's two calls, scripted."""

    def __init__(self, name: str, *, broken: bool = False, fails: bool = False) -> None:
        self.name = name
        self.broken = broken
        self.fails = fails
        self.calls: list[str] = []

    async def fetchmany(self, sql: str, args: list[list[Any]]) -> list[tuple[Any, ...]]:
        self.calls.append("fetchmany")
        if self.broken:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        return [(values[0], values[1]) for values in args]

    async def fetch(self, sql: str, *values: Any) -> list[tuple[Any, ...]]:
        self.calls.append("fetch")
        if self.broken:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        if self.fails:
            raise asyncpg.PostgresError("no")
        return [(values[0], values[1])]


def _values(prepared: Any, n: int) -> list[Any]:
    return prepared.bind({"n": n, SLOT: 0})[1]


def test_a_failed_batch_reads_again_alone_each_with_its_own_answer() -> None:
    prepared = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other, failing = _Conn("leader", broken=True), _Conn("other"), _Conn("x", fails=True)

    async def scenario() -> list[Any]:
        group = read_group()
        reads = [
            group.fetch(conn, prepared, _values(prepared, n))
            for n, conn in enumerate((leader, other, failing), start=1)
        ]
        return list(await asyncio.gather(*reads, return_exceptions=True))

    first, second, third = asyncio.run(scenario())

    assert isinstance(first, DBAPIError)  # its own connection is broken: its own error
    assert second == [(2, 0)]  # read again alone: its own row, its slot the one it sent
    assert isinstance(third, DBAPIError) and isinstance(third.orig, asyncpg.PostgresError)
    assert leader.calls == ["fetchmany", "fetch"]
    assert other.calls == ["fetch"] and failing.calls == ["fetch"]


def test_together_each_reader_gets_the_rows_of_its_slot() -> None:
    prepared = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other = _Conn("leader"), _Conn("other")

    async def scenario() -> tuple[list[Any], int]:
        group = read_group()
        answers = await asyncio.gather(
            group.fetch(leader, prepared, _values(prepared, 7)),
            group.fetch(other, prepared, _values(prepared, 8)),
            group.fetch(other, prepared, _values(prepared, 7)),
        )
        return list(answers), group.batches

    answers, batches = asyncio.run(scenario())

    assert answers == [[(7, 0)], [(8, 1)], [(7, 2)]]
    assert batches == 1 and leader.calls == ["fetchmany"] and other.calls == []


def test_a_reader_cancelled_before_its_batch_is_left_out() -> None:
    prepared = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other = _Conn("leader"), _Conn("other")

    async def scenario() -> Any:
        group = read_group()
        gone = asyncio.ensure_future(group.fetch(leader, prepared, _values(prepared, 1)))
        kept = asyncio.ensure_future(group.fetch(other, prepared, _values(prepared, 2)))
        await asyncio.sleep(0)  # both queued; the batch runs at the next turn
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await kept

    assert asyncio.run(scenario()) == [(2, 0)]
    assert leader.calls == [] and other.calls == ["fetch"]


class _Pool:
    """A loop's pool, scripted (`aio_reads.Pool`): hands out `conns` in turn, records what is
    given back."""

    def __init__(self, *conns: _Conn) -> None:
        self.conns = list(conns)
        self.released: list[tuple[str, bool]] = []

    async def acquire(self) -> _Conn:
        return self.conns.pop(0)

    def release(self, conn: _Conn, healthy: bool) -> None:
        self.released.append((conn.name, healthy))

    async def alone(self, work: Any) -> Any:
        conn = await self.acquire()
        try:
            return await work(conn)
        finally:
            self.release(conn, True)


def _together(*reads: tuple[_Conn | None, int, _Pool]) -> tuple[list[Any], int]:
    """Each read (its connection or None, its `n`, its pool) asked for at the same turn: the
    answers (an error as its answer) and how many round trips carried more than one read."""
    prepared = Statements(asyncpg_dialect()).prepare(_STATEMENT)

    async def scenario() -> tuple[list[Any], int]:
        group = read_group()
        asked = (group.fetch(conn, prepared, _values(prepared, n), pool) for conn, n, pool in reads)
        answers = await asyncio.gather(*asked, return_exceptions=True)
        return list(answers), group.batches

    return asyncio.run(scenario())


def test_readers_without_a_connection_go_together_on_one_the_batch_takes() -> None:
    """Decision 0501: a read unit whose first statement is a grouped read holds no connection;
    its batch takes one from the pool for its round trip and gives it back."""
    taken = _Conn("taken")
    pool = _Pool(taken)

    answers, batches = _together((None, 4, pool), (None, 5, pool), (None, 6, pool))

    assert answers == [[(4, 0)], [(5, 1)], [(6, 2)]]
    assert batches == 1 and taken.calls == ["fetchmany"]
    assert pool.released == [("taken", True)] and pool.conns == []


def test_a_reader_holding_a_connection_carries_the_others() -> None:
    holder = _Conn("holder")
    pool = _Pool(_Conn("never"))

    answers, _ = _together((None, 1, pool), (holder, 2, pool))

    assert answers == [[(1, 0)], [(2, 1)]]
    assert holder.calls == ["fetchmany"]
    assert pool.released == [] and [c.name for c in pool.conns] == ["never"]  # nothing taken


def test_a_failed_batch_without_a_holder_reads_again_each_on_a_connection_of_its_own() -> None:
    broken, first, second = _Conn("broken", broken=True), _Conn("first"), _Conn("second")
    pool = _Pool(broken, first, second)

    answers, _ = _together((None, 1, pool), (None, 2, pool))

    assert answers == [[(1, 0)], [(2, 0)]]
    assert broken.calls == ["fetchmany"] and first.calls == ["fetch"] == second.calls
    # The batch's connection is given back before the readers read again (a pool of one
    # connection would otherwise wait for ever); the pool discards it if it is closed.
    assert pool.released == [("broken", True), ("first", True), ("second", True)]


def test_no_connection_to_be_had_gives_each_reader_its_own_error() -> None:
    class _Down(_Pool):
        async def acquire(self) -> _Conn:
            raise DBAPIError("connect", None, OSError("refused"))

    pool = _Down()

    (first, second), _ = _together((None, 1, pool), (None, 2, pool))

    assert isinstance(first, DBAPIError) and isinstance(second, DBAPIError)
    assert first is not second


def test_reads_of_two_pools_never_go_together() -> None:
    """Two databases on one loop (two runtimes): the same statement read from each goes to
    its own database."""
    one, two = _Conn("one"), _Conn("two")
    pool_one, pool_two = _Pool(one), _Pool(two)

    answers, _ = _together((one, 1, pool_one), (two, 2, pool_two), (None, 3, pool_two))

    assert answers == [[(1, 0)], [(2, 0)], [(3, 1)]]
    assert one.calls == ["fetch"] and two.calls == ["fetchmany"]


def test_a_reader_with_neither_a_connection_nor_a_pool_is_refused() -> None:
    prepared = Statements(asyncpg_dialect()).prepare(_STATEMENT)

    async def scenario() -> None:
        await read_group().fetch(None, prepared, _values(prepared, 1))

    with pytest.raises(ValueError, match="needs the pool"):
        asyncio.run(scenario())
