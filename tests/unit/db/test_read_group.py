"""`ReadGroup` (decision 0450), on scripted asyncpg connections: a read with nothing else in
flight goes at once; reads asked for while one is go together at the next loop turn, each
reader getting the rows of its own slot; when a batch fails nothing was written, so each reader
reads again alone on its own connection and gets its own answer or its own error, as without
grouping; a reader cancelled before its batch ran is left out of it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Integer, bindparam, select
from sqlalchemy.exc import DBAPIError

from mercato.db.aio_postgres import asyncpg_dialect
from mercato.db.aio_reads import SLOT, ReadGroup, grouped, read_group
from mercato.db.aio_statements import Statements

_STATEMENT = grouped(select(bindparam("n", type_=Integer)))


class _Conn:
    """An asyncpg connection's two calls, scripted."""

    def __init__(self, name: str, *, broken: bool = False, fails: bool = False) -> None:
        self.name = name
        self.broken = broken
        self.fails = fails
        self.calls: list[str] = []
        self.gate: asyncio.Future[None] | None = None
        """When set, `fetch` waits for it (a read in flight)."""

    async def fetchmany(self, sql: str, args: list[list[Any]]) -> list[tuple[Any, ...]]:
        self.calls.append("fetchmany")
        if self.broken:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        return [(values[0], values[1]) for values in args]

    async def fetch(self, sql: str, *values: Any) -> list[tuple[Any, ...]]:
        self.calls.append("fetch")
        if self.gate is not None:
            await self.gate
        if self.broken:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        if self.fails:
            raise asyncpg.PostgresError("no")
        return [(values[0], values[1])]


def _values(prepared: Any, n: int) -> list[Any]:
    return prepared.bind({"n": n, SLOT: 0})[1]


async def _busy(group: ReadGroup, prepared: Any) -> tuple[asyncio.Future[Any], Any]:
    """A read in flight (sent at once, its answer held back until the returned gate is set):
    the reads asked for meanwhile go together."""
    conn = _Conn("busy")
    gate = conn.gate = asyncio.get_running_loop().create_future()
    sent = asyncio.ensure_future(group.fetch(conn, prepared, _values(prepared, 0)))
    await asyncio.sleep(0)
    assert conn.calls == ["fetch"]
    return sent, gate


def test_a_read_with_nothing_else_in_flight_goes_at_once() -> None:
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    conn = _Conn("alone")

    async def scenario() -> tuple[Any, int]:
        group = read_group()
        return await group.fetch(conn, prepared, _values(prepared, 5)), group.batches

    assert asyncio.run(scenario()) == ([(5, 0)], 0)
    assert conn.calls == ["fetch"]


def test_a_failed_batch_reads_again_alone_each_with_its_own_answer() -> None:
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other, failing = _Conn("leader", broken=True), _Conn("other"), _Conn("x", fails=True)

    async def scenario() -> list[Any]:
        group = read_group()
        busy, gate = await _busy(group, prepared)
        reads = [
            group.fetch(conn, prepared, _values(prepared, n))
            for n, conn in enumerate((leader, other, failing), start=1)
        ]
        answers = list(await asyncio.gather(*reads, return_exceptions=True))
        gate.set_result(None)
        await busy
        return answers

    first, second, third = asyncio.run(scenario())

    assert isinstance(first, DBAPIError)  # its own connection is broken: its own error
    assert second == [(2, 0)]  # read again alone: its own row, its slot the one it sent
    assert isinstance(third, DBAPIError) and isinstance(third.orig, asyncpg.PostgresError)
    assert leader.calls == ["fetchmany", "fetch"]
    assert other.calls == ["fetch"] and failing.calls == ["fetch"]


def test_together_each_reader_gets_the_rows_of_its_slot() -> None:
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other = _Conn("leader"), _Conn("other")

    async def scenario() -> tuple[list[Any], int]:
        group = read_group()
        busy, gate = await _busy(group, prepared)
        answers = await asyncio.gather(
            group.fetch(leader, prepared, _values(prepared, 7)),
            group.fetch(other, prepared, _values(prepared, 8)),
            group.fetch(other, prepared, _values(prepared, 7)),
        )
        gate.set_result(None)
        await busy
        return list(answers), group.batches

    answers, batches = asyncio.run(scenario())

    assert answers == [[(7, 0)], [(8, 1)], [(7, 2)]]
    assert batches == 1 and leader.calls == ["fetchmany"] and other.calls == []


def test_a_reader_cancelled_before_its_batch_is_left_out() -> None:
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    leader, other = _Conn("leader"), _Conn("other")

    async def scenario() -> Any:
        group = read_group()
        busy, gate = await _busy(group, prepared)
        gone = asyncio.ensure_future(group.fetch(leader, prepared, _values(prepared, 1)))
        kept = asyncio.ensure_future(group.fetch(other, prepared, _values(prepared, 2)))
        await asyncio.sleep(0)  # both queued; the batch runs at the next turn
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        answer = await kept
        gate.set_result(None)
        await busy
        return answer

    assert asyncio.run(scenario()) == [(2, 0)]
    assert leader.calls == [] and other.calls == ["fetch"]
