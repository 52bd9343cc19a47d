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
from mercato.db.aio_reads import SLOT, grouped, read_group
from mercato.db.aio_statements import Statements

_STATEMENT = grouped(select(bindparam("n", type_=Integer)))


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
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
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
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
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
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
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
