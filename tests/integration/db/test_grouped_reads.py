"""Grouped reads (decisions 0450, 0501): the reads of a `grouped` statement that concurrent read
units ask for together go in one round trip on PostgreSQL, on the connection of a reader that
holds one, else on one the batch takes (a unit whose first statement is a grouped read holds
none);
every reader gets exactly the rows its statement alone reads (none, one, several; the same
parameters twice are two reads). A statement in a transaction is never grouped: it runs on its
unit's own connection, inside its transaction. On SQLite every read runs alone, same answers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest
from sqlalchemy import Table, bindparam, func, select

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.accounts.models import Account
from mercato.db.aio_postgres import PostgresDatabase
from mercato.db.aio_reads import GROUP_MAX, grouped, read_group
from mercato.db.plans import Rows
from mercato.db.runtime import Runtime

_accounts = cast(Table, Account.__table__).c
_BY_PATTERN = grouped(
    select(_accounts.email)
    .where(_accounts.email.like(bindparam("pattern")))
    .order_by(_accounts.email)
)
_PLAIN = (
    select(_accounts.email)
    .where(_accounts.email.like(bindparam("pattern")))
    .order_by(_accounts.email)
)
_WARM = select(func.count()).select_from(Account.__table__)
PATTERNS = ["a%", "b%", "c%", "a%", "%@grouped.example", "b1%"]


async def _warm(runtime: Runtime, units: int) -> None:
    """Open `units` connections and leave them idle in the loop's pool, so that concurrent
    units then take theirs without waiting (and ask for their reads at the same turn). Each
    unit reads once: a read unit takes its connection at its first statement (decision 0461)."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(units):
            conn = await stack.enter_async_context(runtime.adb.read())
            await conn.execute(Rows(_WARM))


async def _read(runtime: Runtime, pattern: str) -> list[tuple[Any, ...]]:
    async with runtime.adb.read() as conn:
        rows = await conn.execute(Rows(_BY_PATTERN, {"pattern": pattern}))
    return [tuple(row) for row in rows]


def test_concurrent_reads_each_get_their_own_rows(runtime: Runtime) -> None:
    for email in ("a1@grouped.example", "a2@grouped.example", "b1@grouped.example"):
        make_account(runtime.db, email)

    async def scenario() -> tuple[list[list[tuple[Any, ...]]], int, list[list[tuple[Any, ...]]]]:
        await _warm(runtime, len(PATTERNS))
        together = list(await asyncio.gather(*(_read(runtime, p) for p in PATTERNS)))
        batches = read_group().batches if runtime.adb.dialect == "postgresql" else 0
        alone = []
        for pattern in PATTERNS:
            async with runtime.adb.read() as conn:
                alone.append(await conn.execute(Rows(_PLAIN, {"pattern": pattern})))
        return together, batches, [[tuple(r) for r in rows] for rows in alone]

    together, batches, alone = run_on_fresh_loop(scenario())

    assert together == alone
    assert together[0] == [("a1@grouped.example",), ("a2@grouped.example",)]
    assert together[2] == []
    assert len(together[4]) == 3
    assert batches == (1 if runtime.adb.dialect == "postgresql" else 0)


_BACKEND = select(func.pg_backend_pid())
_GROUPED_BACKEND = grouped(select(func.pg_backend_pid()))


@pytest.mark.postgres_only
def test_grouped_reads_share_one_connection_but_a_transaction_keeps_its_own(
    runtime: Runtime,
) -> None:
    async def read_backend() -> int:
        async with runtime.adb.read() as conn:
            rows = await conn.execute(Rows(_GROUPED_BACKEND, {}))
        return int(rows[0][0])

    async def scenario() -> tuple[list[int], int, int]:
        await _warm(runtime, 6)
        async with runtime.adb.transaction() as conn:
            own = (await conn.execute(Rows(_BACKEND)))[0][0]
            # The readers and the transaction's own read asked for at the same turn.
            *pids, in_transaction = await asyncio.gather(
                *(read_backend() for _ in range(5)), conn.execute(Rows(_GROUPED_BACKEND, {}))
            )
        return cast(list[int], pids), int(own), int(in_transaction[0][0])

    pids, own, grouped_pid = run_on_fresh_loop(scenario())

    assert len(set(pids)) == 1  # one round trip, on the first reader's connection
    assert grouped_pid == own


@pytest.mark.sqlite_only
def test_on_sqlite_a_grouped_first_read_runs_alone_and_the_unit_begins_at_its_next(
    runtime: Runtime,
) -> None:
    """Decision 0475: the grouped read that opens a SQLite read unit runs on its own snapshot,
    as on PostgreSQL (no BEGIN/ROLLBACK for a replay's one read); the unit's later statements
    share the transaction its second statement begins."""
    make_account(runtime.db, "a1@alone.example")
    pattern = "%@alone.example"

    async def scenario() -> tuple[int, int, int, bool]:
        async with runtime.adb.read() as conn:
            first = await conn.execute(Rows(_BY_PATTERN, {"pattern": pattern}))
            make_account(runtime.db, "a2@alone.example")  # committed between the two
            second = await conn.execute(Rows(_PLAIN, {"pattern": pattern}))
            make_account(runtime.db, "a3@alone.example")  # after the transaction began
            third = await conn.execute(Rows(_PLAIN, {"pattern": pattern}))
        async with runtime.adb.read() as conn:  # the connection went back fit for reuse
            again = await conn.execute(Rows(_BY_PATTERN, {"pattern": pattern}))
        return len(first), len(second), len(third), len(again) == 3

    assert run_on_fresh_loop(scenario()) == (1, 2, 2, True)


async def _backend(adb: PostgresDatabase) -> int:
    async with adb.read() as conn:
        rows = await conn.execute(Rows(_GROUPED_BACKEND, {}))
    return int(rows[0][0])


@pytest.mark.postgres_only
def test_read_units_that_only_read_grouped_take_no_connection(runtime: Runtime) -> None:
    """Decision 0501: with ONE connection in the pool, six units whose one statement is a
    grouped read go together in one round trip, on a connection their batch takes; before,
    each unit took the connection in turn and read alone."""
    adb = PostgresDatabase(runtime.db, max_size=1)

    async def scenario() -> tuple[list[int], int]:
        pids = await asyncio.wait_for(asyncio.gather(*(_backend(adb) for _ in range(6))), 30)
        return list(pids), read_group().batches

    pids, batches = run_on_fresh_loop(scenario())

    assert len(set(pids)) == 1 and batches == 1


@pytest.mark.postgres_only
def test_a_batch_that_takes_a_connection_never_waits_on_its_holder(runtime: Runtime) -> None:
    """ONE connection, held by a unit that reads grouped at the same turn as 70 units holding
    none: they go in two batches (at most 64 reads in one), the first without a holder, so it
    waits for the connection, the second on the holder's. The holder's read is in the second,
    its unit ends, and the first batch gets the connection: nothing waits for ever."""
    adb = PostgresDatabase(runtime.db, max_size=1)
    readers = GROUP_MAX + 6

    async def scenario() -> tuple[int, list[int], int]:
        holding, go = asyncio.Event(), asyncio.Event()

        async def holder() -> tuple[int, int]:
            async with adb.read() as conn:
                own = (await conn.execute(Rows(_BACKEND)))[0][0]  # takes the one connection
                holding.set()
                await go.wait()
                grouped_pid = (await conn.execute(Rows(_GROUPED_BACKEND, {})))[0][0]
            return int(own), int(grouped_pid)

        held = asyncio.ensure_future(holder())
        await holding.wait()
        others = [asyncio.ensure_future(_backend(adb)) for _ in range(readers)]
        go.set()  # the holder asks for its read after the others, at the same turn
        (own, grouped_pid), *pids = await asyncio.wait_for(asyncio.gather(held, *others), 30)
        assert grouped_pid == own
        return own, list(pids), read_group().batches

    own, pids, batches = run_on_fresh_loop(scenario())

    assert len(pids) == readers and set(pids) == {own}  # the pool's one connection
    assert batches == 2
