"""`ReadGroup` (decision 0450), on scripted asyncpg connections: a read goes at once while
fewer than `LANES` round trips are in flight; the reads asked for meanwhile go together next,
each reader getting the rows of its own slot; when a batch fails nothing was written, so each
reader reads again alone on its own connection and gets its own answer or error, as without
grouping; a reader cancelled while waiting is left out, and one cancelled after it was made
leader passes the lead on."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Integer, bindparam, select
from sqlalchemy.exc import DBAPIError

from mercato.db.aio_postgres import asyncpg_dialect
from mercato.db.aio_reads import LANES, SLOT, ReadGroup, grouped, read_group
from mercato.db.aio_statements import Prepared, Statements

_STATEMENT = grouped(select(bindparam("n", type_=Integer)))


class _Conn:
    """An asyncpg connection's two calls, scripted: a row (n, slot) per execution."""

    def __init__(self, *, broken: bool = False, fails: bool = False) -> None:
        self.broken = broken
        self.fails = fails
        self.calls: list[str] = []
        self.gate: asyncio.Future[None] | None = None
        """When set, `fetch` waits for it (a batch in flight)."""

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


def _prepared() -> Prepared:
    prepared, _ = Statements(asyncpg_dialect()).prepare(_STATEMENT)
    return prepared


def _read(group: ReadGroup, conn: _Conn, prepared: Prepared, n: int) -> asyncio.Future[Any]:
    return asyncio.ensure_future(group.fetch(conn, prepared, prepared.bind({"n": n, SLOT: 0})[1]))


async def _in_flight(group: ReadGroup, prepared: Prepared) -> tuple[asyncio.Future[Any], _Conn]:
    """`LANES` reads sent and not yet answered (their connections' gates closed): the first,
    returned, and the others, answered at once when the first is."""
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    sent = []
    for _ in range(LANES):
        conn = _Conn()
        conn.gate = gate
        sent.append(_read(group, conn, prepared, 0))
    await asyncio.sleep(0)
    assert conn.calls == ["fetch"]
    return asyncio.gather(*sent), conn


def test_the_reads_asked_for_during_a_round_trip_go_together_next() -> None:
    prepared = _prepared()
    leader, other = _Conn(), _Conn()

    async def scenario() -> tuple[list[Any], int]:
        group = read_group()
        sent, first = await _in_flight(group, prepared)
        waiting = [
            _read(group, leader, prepared, 8),
            _read(group, other, prepared, 7),
            _read(group, other, prepared, 7),  # the same parameters twice: two reads
        ]
        await asyncio.sleep(0)
        assert leader.calls == []  # they wait for the batch in flight
        assert first.gate is not None
        first.gate.set_result(None)
        answers = await asyncio.gather(sent, *waiting)
        return list(answers), group.batches

    answers, batches = asyncio.run(scenario())

    assert answers == [[[(0, 0)]] * LANES, [(8, 0)], [(7, 1)], [(7, 2)]]
    assert batches == 1 and leader.calls == ["fetchmany"] and other.calls == []


def test_a_read_with_nothing_in_flight_goes_at_once_alone() -> None:
    prepared = _prepared()
    conn = _Conn()

    async def scenario() -> tuple[Any, int]:
        group = read_group()
        return await group.fetch(conn, prepared, prepared.bind({"n": 5, SLOT: 0})[1]), group.batches

    assert asyncio.run(scenario()) == ([(5, 0)], 0)
    assert conn.calls == ["fetch"]


def test_a_failed_batch_reads_again_alone_each_with_its_own_answer() -> None:
    prepared = _prepared()
    leader, other, failing = _Conn(broken=True), _Conn(), _Conn(fails=True)

    async def scenario() -> list[Any]:
        group = read_group()
        sent, first = await _in_flight(group, prepared)
        waiting = [_read(group, c, prepared, n) for n, c in ((1, leader), (2, other), (3, failing))]
        await asyncio.sleep(0)
        assert first.gate is not None
        first.gate.set_result(None)
        await sent
        return list(await asyncio.gather(*waiting, return_exceptions=True))

    first, second, third = asyncio.run(scenario())

    assert isinstance(first, DBAPIError)  # alone on its broken connection: its own error
    assert second == [(2, 0)]  # alone: its own row
    assert isinstance(third, DBAPIError) and isinstance(third.orig, asyncpg.PostgresError)
    assert leader.calls == ["fetchmany", "fetch"]
    assert other.calls == ["fetch"] and failing.calls == ["fetch"]


def test_a_reader_cancelled_while_waiting_is_left_out() -> None:
    prepared = _prepared()
    gone, kept = _Conn(), _Conn()

    async def scenario() -> Any:
        group = read_group()
        sent, first = await _in_flight(group, prepared)
        cancelled = _read(group, gone, prepared, 1)
        answered = _read(group, kept, prepared, 2)
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert first.gate is not None
        first.gate.set_result(None)
        await sent
        return await answered

    assert asyncio.run(scenario()) == [(2, 0)]
    assert gone.calls == [] and kept.calls == ["fetch"]


def test_a_leader_cancelled_before_it_sent_passes_the_lead_on() -> None:
    prepared = _prepared()
    gone, second, third = _Conn(), _Conn(), _Conn()

    async def scenario() -> list[Any]:
        group = read_group()
        sent, first = await _in_flight(group, prepared)
        made_leader = _read(group, gone, prepared, 1)
        kept = [_read(group, second, prepared, 2), _read(group, third, prepared, 3)]
        await asyncio.sleep(0)
        assert first.gate is not None
        first.gate.set_result(None)
        await asyncio.sleep(0)  # the first read is answered and hands the next batch on ...
        assert prepared.sql not in group._waiting  # all three handed on
        made_leader.cancel()  # ... whose leader is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await made_leader
        await sent
        return list(await asyncio.gather(*kept))

    assert asyncio.run(scenario()) == [[(2, 0)], [(3, 1)]]
    assert gone.calls == [] and second.calls == ["fetchmany"] and third.calls == []
