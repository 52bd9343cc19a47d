"""The real async drivers (asyncpg on PostgreSQL, sqlite3 on the loop on SQLite) behave as the
sync sessions do: the same values for every column type of the schema, the same SQLAlchemy
exceptions, and the units of work's rules (read never writes, statement runs once,
transaction rolls back on error)."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import IntegrityError, OperationalError

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import utcnow
from mercato.core.ids import SystemIds, new_id
from mercato.db import guarded
from mercato.db.base import Base, UTCDateTime
from mercato.db.plans import Rows, Run
from mercato.db.runtime import Runtime
from mercato.db.uow import ReadSessionWrote, StatementSessionReused
from mercato.ledger import service as ledger
from mercato.ledger.models import Reservation

_PROBE_META = MetaData()
PROBE = Table(
    "mercato_async_probe",
    _PROBE_META,
    Column("id", String(40), primary_key=True),
    Column("name", String(200)),
    Column("body", Text, nullable=True),
    Column("small", Integer, nullable=True),
    Column("big", BigInteger, nullable=True),
    Column("flag", Boolean, nullable=True),
    Column("doc", JSON, nullable=True),
    Column("document", JSON().with_variant(JSONB(), "postgresql"), nullable=True),
    Column("blob", LargeBinary, nullable=True),
    Column("at", UTCDateTime, nullable=True),
    Column("naive_at", DateTime, nullable=True),
)
_COLUMNS = [c.name for c in PROBE.columns]
_INSERT = insert(PROBE)
_BY_ID = select(PROBE).where(PROBE.c.id == bindparam("id"))

# Every value kind the schema stores, with its edge cases.
_PARIS = dt.timezone(dt.timedelta(hours=1))
ROWS: list[dict[str, Any]] = [
    {
        "id": "full",
        "name": "naïve café ✓ 'quoted' \"x\"",
        "body": "line\nline2\ttab " + "x" * 3000,
        "small": -2_147_483_648,
        "big": 9_007_199_254_740_993,
        "flag": True,
        "doc": {"a": [1, 2.5, None, "é"], "b": {"nested": True}},
        "document": {"resultSchema": {"type": "object"}, "n": 10**12},
        "blob": b"\x00\x01\xfe\xff" + bytes(range(256)),
        "at": dt.datetime(2026, 5, 1, 10, 30, 15, 123456, tzinfo=_PARIS),
        "naive_at": dt.datetime(2026, 5, 1, 9, 0, 0, 5),
    },
    {
        "id": "falsy",
        "name": "",
        "body": "",
        "small": 0,
        "big": 0,
        "flag": False,
        "doc": [],
        "document": {},
        "blob": b"",
        "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        "naive_at": dt.datetime(2000, 2, 29),
    },
    {"id": "nulls", "name": "n", **{c: None for c in _COLUMNS[2:]}},
]


def _expected(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in _COLUMNS)


@pytest.fixture
def probe(runtime: Runtime) -> Iterator[Table]:
    _PROBE_META.create_all(runtime.db.engine)
    yield PROBE
    _PROBE_META.drop_all(runtime.db.engine)


def test_the_probe_covers_every_column_type_of_the_schema() -> None:
    def kind(type_: Any) -> str:
        return type(type_).__name__

    schema = {kind(c.type) for t in Base.metadata.tables.values() for c in t.columns}
    covered = {kind(c.type) for c in PROBE.columns}
    assert schema <= covered, schema - covered


def _sync_rows(runtime: Runtime, ids: list[str]) -> list[tuple[Any, ...]]:
    with runtime.db.read() as session:
        return [tuple(session.execute(_BY_ID, {"id": i}).one()) for i in ids]


async def _async_rows(runtime: Runtime, ids: list[str]) -> list[tuple[Any, ...]]:
    async with runtime.adb.read() as conn:
        return [(await conn.execute(Rows(_BY_ID, {"id": i})))[0] for i in ids]


def test_values_written_async_read_back_the_same_on_both_sides(
    runtime: Runtime, probe: Table
) -> None:
    async def write() -> None:
        async with runtime.adb.transaction() as conn:
            for row in ROWS:
                assert await conn.execute(Rows(_INSERT, row)) == []

    run_on_fresh_loop(write())
    ids = [row["id"] for row in ROWS]
    expected = [_expected(row) for row in ROWS]
    synced, asynced = _sync_rows(runtime, ids), run_on_fresh_loop(_async_rows(runtime, ids))
    assert synced == expected
    assert asynced == expected
    for sync_row, async_row in zip(synced, asynced, strict=True):
        assert [type(v) for v in sync_row] == [type(v) for v in async_row]
    at = asynced[0][_COLUMNS.index("at")]
    assert at.utcoffset() == dt.timedelta(0)  # UTCDateTime: aware, in UTC


def test_values_written_sync_read_back_the_same_async(runtime: Runtime, probe: Table) -> None:
    with runtime.db.transaction() as session:
        for row in ROWS:
            session.execute(_INSERT, row)
    ids = [row["id"] for row in ROWS]
    assert run_on_fresh_loop(_async_rows(runtime, ids)) == _sync_rows(runtime, ids)
    assert _sync_rows(runtime, ids) == [_expected(row) for row in ROWS]


def test_executemany_and_per_call_statements(runtime: Runtime, probe: Table) -> None:
    many = [{"id": f"m{i}", "name": f"n{i}", "small": i} for i in range(5)]

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        async with runtime.adb.transaction() as conn:
            await conn.execute(Rows(insert(PROBE), many))
            returned = await conn.execute(
                Rows(
                    insert(PROBE).returning(PROBE.c.id, PROBE.c.small),
                    [{"id": "r1", "name": "r", "small": 7}, {"id": "r2", "name": "r", "small": 8}],
                )
            )
        async with runtime.adb.read() as conn:
            # built per call, literal values inside: each call binds its own values
            first = await conn.execute(Rows(select(PROBE.c.id).where(PROBE.c.small == 3)))
            second = await conn.execute(Rows(select(PROBE.c.id).where(PROBE.c.small == 4)))
            expanding = await conn.execute(
                Rows(
                    select(PROBE.c.id)
                    .where(PROBE.c.id.in_(bindparam("ids", expanding=True)))
                    .order_by(PROBE.c.id),
                    {"ids": ["m1", "r2", "none"]},
                )
            )
        return returned, first + second, expanding

    returned, looked_up, expanding = run_on_fresh_loop(scenario())
    assert returned == [("r1", 7), ("r2", 8)]
    assert looked_up == [("m3",), ("m4",)]
    assert expanding == [("m1",), ("r2",)]


def test_unique_violation_is_integrity_error_with_sqlstate_and_rolls_back(
    runtime: Runtime, probe: Table
) -> None:
    async def scenario() -> IntegrityError:
        async with runtime.adb.transaction() as conn:
            await conn.execute(Rows(_INSERT, {"id": "dup", "name": "first"}))
        with pytest.raises(IntegrityError) as caught:
            async with runtime.adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": "other", "name": "same transaction"}))
                await conn.execute(Rows(_INSERT, {"id": "dup", "name": "second"}))
        return caught.value

    error = run_on_fresh_loop(scenario())
    if runtime.adb.dialect == "postgresql":
        assert error.orig.sqlstate == "23505"  # type: ignore[union-attr]
    else:
        assert isinstance(error.orig, sqlite3.IntegrityError)
    assert "second" not in str(error)  # parameters are never rendered
    with runtime.db.read() as session:
        ids = session.execute(select(PROBE.c.id)).scalars().all()
    assert ids == ["dup"]  # the transaction's first insert was rolled back with it


@pytest.mark.postgres_only
def test_serialization_failure_is_operational_error_with_sqlstate(runtime: Runtime) -> None:
    raise_40001 = text("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")

    async def scenario() -> OperationalError:
        with pytest.raises(OperationalError) as caught:
            async with runtime.adb.transaction() as conn:
                await conn.execute(Rows(raise_40001))
        async with runtime.adb.read() as conn:  # the connection is fit for the next unit
            assert await conn.execute(Rows(select(bindparam("one", 1)))) == [(1,)]
        return caught.value

    assert run_on_fresh_loop(scenario()).orig.sqlstate == "40001"  # type: ignore[union-attr]


@pytest.mark.sqlite_only
def test_a_held_write_lock_past_the_timeout_is_operational_error(runtime: Runtime) -> None:
    from mercato.db.aio_sqlite import SqliteDatabase

    adb = SqliteDatabase(runtime.db, lock_timeout=0)
    holder = sqlite3.connect(
        runtime.db.engine.url.database or "", isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")

    async def scenario() -> None:
        async with adb.transaction():
            raise AssertionError("the lock is held elsewhere")

    try:
        with pytest.raises(OperationalError, match="locked"):
            run_on_fresh_loop(scenario())
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.sqlite_only
def test_the_async_connections_checkpoint_the_wal_ten_times_less_often(runtime: Runtime) -> None:
    """Decision 0436: the serve process's commits checkpoint every 10,000 WAL pages, not 1,000."""
    from mercato.db.aio_sqlite import WAL_AUTOCHECKPOINT_PAGES, SqliteDatabase

    adb = SqliteDatabase(runtime.db)
    raw = adb._connect()
    try:
        assert raw.execute("PRAGMA wal_autocheckpoint").fetchone() == (10_000,)
        assert WAL_AUTOCHECKPOINT_PAGES == 10_000
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL, as before
    finally:
        raw.close()


def test_a_refused_program_raises_refused_and_writes_nothing(runtime: Runtime) -> None:
    account = make_account(runtime.db, "poor@example.com")

    async def scenario() -> None:
        async with runtime.adb.statement() as conn:
            await conn.execute(
                Run(
                    ledger._RESERVE,
                    {
                        "reservation_id": "res_refused",
                        "account_id": account,
                        "amount": 5,
                        "reference": "ref-refused",
                        "now": utcnow(),
                    },
                )
            )

    with pytest.raises(guarded.Refused) as caught:
        run_on_fresh_loop(scenario())
    assert caught.value.code == "short"
    assert caught.value.number(0) == 0
    with runtime.db.read() as session:
        assert session.get(Reservation, "res_refused") is None
        assert ledger.balances(session, account_id=account).available == 0


def test_read_refuses_writes(runtime: Runtime, probe: Table) -> None:
    async def scenario() -> None:
        async with runtime.adb.read() as conn:
            with pytest.raises(ReadSessionWrote):
                await conn.execute(Rows(_INSERT, {"id": "r", "name": "n"}))
            with pytest.raises(ReadSessionWrote):
                await conn.execute(Run(ledger._REFUND, {"reservation_id": "x", "now": utcnow()}))

    run_on_fresh_loop(scenario())
    assert _count(runtime) == 0


def test_statement_refuses_a_second_statement(runtime: Runtime, probe: Table) -> None:
    async def scenario() -> None:
        async with runtime.adb.statement() as conn:
            await conn.execute(Rows(_INSERT, {"id": "one", "name": "n"}))
            with pytest.raises(StatementSessionReused):
                await conn.execute(Rows(_INSERT, {"id": "two", "name": "n"}))

    run_on_fresh_loop(scenario())
    with runtime.db.read() as session:
        assert session.execute(select(PROBE.c.id)).scalars().all() == ["one"]


def test_transaction_rolls_back_on_an_exception(runtime: Runtime, probe: Table) -> None:
    async def scenario() -> None:
        with pytest.raises(LookupError):
            async with runtime.adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": "gone", "name": "n"}))
                raise LookupError("the plan failed after writing")
        async with runtime.adb.transaction() as conn:
            await conn.execute(Rows(_INSERT, {"id": "kept", "name": "n"}))

    run_on_fresh_loop(scenario())
    with runtime.db.read() as session:
        assert session.execute(select(PROBE.c.id)).scalars().all() == ["kept"]


def _count(runtime: Runtime) -> int:
    with runtime.db.read() as session:
        return len(session.execute(select(PROBE.c.id)).all())


class _CountingIds(SystemIds):
    def __init__(self) -> None:
        self.made: list[str] = []

    def new(self, prefix: str) -> str:
        made = super().new(prefix)
        self.made.append(made)
        return made


def test_every_unit_binds_the_database_ids(runtime: Runtime) -> None:
    ids = _CountingIds()
    runtime.db.ids = ids
    from mercato.db.aio import make_async_database

    adb = make_async_database(runtime.db)

    async def scenario() -> list[str]:
        made = []
        for unit in (adb.read, adb.transaction, adb.statement):
            async with unit():
                made.append(new_id("x"))
        return made

    made = run_on_fresh_loop(scenario())
    assert made == ids.made
    # ids given to the Database later are the ones the next units bind (the Runtime's adb)
    later = _CountingIds()
    runtime.db.ids = later
    assert run_on_fresh_loop(scenario()) == later.made

    async def on_runtime() -> str:
        async with runtime.adb.transaction():
            return new_id("y")

    assert run_on_fresh_loop(on_runtime()) in later.made
    assert new_id("x") not in ids.made  # outside a unit: the system's ids


# --- SQLite: the write lock never blocks the loop -----------------------------------------


@pytest.mark.sqlite_only
def test_two_writers_on_one_loop_both_commit_while_the_loop_runs(
    runtime: Runtime, probe: Table
) -> None:
    adb = runtime.adb

    async def scenario() -> list[str]:
        order: list[str] = []
        first_holds, second_waits = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": "first", "name": "n"}))
                first_holds.set()
                await second_waits.wait()  # runs only if the second writer yielded the loop
                order.append("first commits")

        async def second() -> None:
            await first_holds.wait()
            second_waits.set()
            async with adb.transaction() as conn:
                order.append("second writes")
                await conn.execute(Rows(_INSERT, {"id": "second", "name": "n"}))

        await asyncio.gather(first(), second())
        return order

    assert run_on_fresh_loop(scenario()) == ["first commits", "second writes"]
    assert _count(runtime) == 2


@pytest.mark.sqlite_only
def test_a_writer_waiting_for_another_connections_lock_leaves_the_loop_running(
    runtime: Runtime, probe: Table
) -> None:
    from mercato.db.aio_sqlite import SqliteDatabase

    backed_off = asyncio.Event()
    waits: list[float] = []

    async def recording_sleep(seconds: float) -> None:
        waits.append(seconds)
        backed_off.set()
        await asyncio.sleep(0)

    adb = SqliteDatabase(runtime.db, sleep=recording_sleep)
    holder = sqlite3.connect(
        runtime.db.engine.url.database or "", isolation_level=None, check_same_thread=False
    )

    async def scenario() -> None:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO mercato_async_probe (id, name) VALUES ('holder', 'n')")

        async def writer() -> None:
            async with adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": "waiter", "name": "n"}))

        waiting = asyncio.create_task(writer())
        await backed_off.wait()  # the waiting writer yielded: this coroutine still runs
        holder.execute("COMMIT")
        await waiting

    try:
        run_on_fresh_loop(scenario())
    finally:
        holder.close()
    assert waits and all(w > 0 for w in waits)
    with runtime.db.read() as session:
        assert sorted(session.execute(select(PROBE.c.id)).scalars()) == ["holder", "waiter"]


# --- PostgreSQL: one pool per loop, dead idle connections replaced --------------------------

_PID = text("SELECT pg_backend_pid()")


@pytest.mark.postgres_only
def test_each_loop_gets_its_own_connections_and_close_ends_them(runtime: Runtime) -> None:
    adb = runtime.adb

    async def pids() -> tuple[int, int]:
        async with adb.read() as conn:
            one = (await conn.execute(Rows(_PID)))[0][0]
        async with adb.read() as conn:
            two = (await conn.execute(Rows(_PID)))[0][0]
        return one, two

    first_loop = run_on_fresh_loop(pids())
    second_loop = run_on_fresh_loop(pids())
    assert first_loop[0] == first_loop[1]  # reused within a loop
    assert second_loop[0] == second_loop[1]
    assert first_loop[0] != second_loop[0]  # a connection never crosses loops

    run_on_fresh_loop(adb.close())

    def alive() -> int:
        with runtime.db.read() as session:
            return int(
                session.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid IN (:a, :b)"),
                    {"a": first_loop[0], "b": second_loop[0]},
                ).scalar_one()
            )

    # The server ends a backend shortly after its client hangs up: wait for that, boundedly.
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() == 0


@pytest.mark.postgres_only
def test_a_read_unit_keeps_its_connection_after_an_error_and_not_after_a_cancel(
    runtime: Runtime,
) -> None:
    # The read unit is a class of its own (decision 0430); it ends as `_unit` ends one: the
    # connection goes back after the block, an error leaves it fit, a cancelled statement
    # (its state unknown) discards it, and the ids the unit bound are unbound either way.
    from mercato.db.aio_postgres import PostgresDatabase

    adb = PostgresDatabase(runtime.db)

    async def pid() -> int:
        async with adb.read() as conn:
            return int((await conn.execute(Rows(_PID)))[0][0])

    async def scenario() -> tuple[int, int, int, int]:
        first = await pid()
        with pytest.raises(ZeroDivisionError):
            async with adb.read() as conn:
                await conn.execute(Rows(_PID))
                _ = 1 / 0
        after_error = await pid()
        with pytest.raises(asyncio.CancelledError):
            async with adb.read() as conn:  # as when cancelled in its statement
                await conn.execute(Rows(_PID))
                raise asyncio.CancelledError
        after_cancel = await pid()
        again = await pid()
        await adb.close()
        return first, after_error, after_cancel, again

    outside = new_id("x")
    first, after_error, after_cancel, again = run_on_fresh_loop(scenario())
    assert first == after_error  # one connection, kept
    assert after_cancel != first  # the cancelled one was discarded
    assert again == after_cancel
    assert new_id("x")[:2] == outside[:2]  # the system's ids again outside the units


@pytest.mark.postgres_only
def test_a_dead_idle_connection_is_replaced(runtime: Runtime) -> None:
    from mercato.db.aio_postgres import PostgresDatabase

    adb = PostgresDatabase(runtime.db, idle_ping_seconds=0)

    def kill(pid: int) -> None:
        with runtime.db.read() as session:
            session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    async def scenario(kill: Callable[[int], None]) -> tuple[int, int]:
        async with adb.read() as conn:
            before = (await conn.execute(Rows(_PID)))[0][0]
        kill(before)  # while it sits idle in the pool
        async with adb.read() as conn:
            after = (await conn.execute(Rows(_PID)))[0][0]
        await adb.close()
        return before, after

    before, after = run_on_fresh_loop(scenario(kill))
    assert before != after


def test_loops_on_two_threads_at_once_each_use_their_own_connections(
    runtime: Runtime, probe: Table
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    async def writes(tag: str) -> int:
        for i in range(20):
            async with runtime.adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": f"{tag}{i}", "name": tag}))
            async with runtime.adb.read() as conn:
                assert (await conn.execute(Rows(_BY_ID, {"id": f"{tag}{i}"})))[0][0] == f"{tag}{i}"
        return i + 1

    with ThreadPoolExecutor(2) as threads:
        done = list(threads.map(lambda tag: run_on_fresh_loop(writes(tag)), ["a", "b"]))
    assert done == [20, 20]
    assert _count(runtime) == 40


def test_a_refusal_aborts_its_transaction_even_when_the_plan_catches_it(
    runtime: Runtime, probe: Table
) -> None:
    from mercato.db.aio import TransactionRefused

    account = make_account(runtime.db, "poor@example.com")
    reserve = Run(
        ledger._RESERVE,
        {
            "reservation_id": "res_aborts",
            "account_id": account,
            "amount": 5,
            "reference": "ref-aborts",
            "now": utcnow(),
        },
    )

    async def scenario() -> None:
        async with runtime.adb.transaction() as conn:
            await conn.execute(Rows(_INSERT, {"id": "before", "name": "n"}))
            with pytest.raises(guarded.Refused):
                await conn.execute(reserve)
            with pytest.raises(TransactionRefused):
                await conn.execute(Rows(_INSERT, {"id": "after", "name": "n"}))
        # the unit ended without an exception, and still wrote nothing
        async with runtime.adb.transaction() as conn:
            await conn.execute(Rows(_INSERT, {"id": "next", "name": "n"}))

    run_on_fresh_loop(scenario())
    with runtime.db.read() as session:
        assert session.execute(select(PROBE.c.id)).scalars().all() == ["next"]
        assert session.get(Reservation, "res_aborts") is None


def _gone(runtime: Runtime, pids: list[int]) -> bool:
    """Whether the server has ended these backends (it does shortly after the client hangs up:
    waited for, boundedly)."""
    deadline = time.monotonic() + 10
    while True:
        with runtime.db.read() as session:
            alive = session.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                {"pids": pids},
            ).scalar_one()
        if alive == 0 or time.monotonic() > deadline:
            return bool(alive == 0)
        time.sleep(0.05)


@pytest.mark.postgres_only
def test_disposing_the_database_ends_the_connections_of_ended_loops(runtime: Runtime) -> None:
    async def pid() -> int:
        async with runtime.adb.read() as conn:
            return int((await conn.execute(Rows(_PID)))[0][0])

    pids = [run_on_fresh_loop(pid())]  # its loop has ended; its connection is idle
    runtime.db.dispose()
    assert _gone(runtime, pids)


def test_observers_see_the_units_and_the_statements_sent(runtime: Runtime, probe: Table) -> None:
    from mercato.db.aio import observing

    account = make_account(runtime.db, "observed@example.com")
    seen: list[tuple[str, str]] = []

    async def scenario() -> None:
        with observing(runtime.adb, lambda kind, detail: seen.append((kind, detail))):
            async with runtime.adb.statement() as conn:
                with pytest.raises(guarded.Refused):
                    await conn.execute(
                        Run(
                            ledger._RESERVE,
                            {
                                "reservation_id": "res_seen",
                                "account_id": account,
                                "amount": 1,
                                "reference": "ref-seen",
                                "now": utcnow(),
                            },
                        )
                    )
            async with runtime.adb.transaction() as conn:
                await conn.execute(Rows(_INSERT, {"id": "seen", "name": "n"}))
        async with runtime.adb.read() as conn:  # not observed any more
            await conn.execute(Rows(_BY_ID, {"id": "seen"}))

    run_on_fresh_loop(scenario())
    units = [detail for kind, detail in seen if kind == "unit"]
    sql = [detail.split()[0] for kind, detail in seen if kind == "sql"]
    assert units == ["statement", "transaction"]
    if runtime.adb.dialect == "postgresql":
        assert sql == ["WITH", "BEGIN", "INSERT", "COMMIT"]  # the money program: one statement
    else:
        assert sql[-1] == "INSERT" and len(sql) >= 2  # the program's steps, then the insert


@pytest.mark.postgres_only
def test_a_postgres_read_that_sends_nothing_takes_no_connection(runtime: Runtime) -> None:
    # A warm invoke's read unit reads nothing (decision 0400): it takes no connection from the
    # pool (decision 0461); a read that sends a statement takes one, and gives it back after.
    from mercato.db.aio_postgres import PostgresDatabase

    opened: list[object] = []

    class Counting(PostgresDatabase):
        def _pool(self) -> Any:
            pool = super()._pool()
            opened.append(pool)
            return pool

    adb = Counting(runtime.db)

    async def scenario() -> tuple[int, int, int, int]:
        async with adb.read():
            pass  # a warm invoke's read: everything from memory
        before = len(opened)
        async with adb.read() as conn:
            backend = int((await conn.execute(Rows(_PID)))[0][0])
            assert int((await conn.execute(Rows(_PID)))[0][0]) == backend  # one connection
        idle = len(adb._pool()._idle)
        await adb.close()
        return before, len(opened), idle, backend

    before, after, idle, backend = run_on_fresh_loop(scenario())
    assert before == 0  # no pool asked, so no connection taken
    assert after >= 1 and idle == 1 and backend > 0


@pytest.mark.postgres_only
def test_a_read_whose_connection_cannot_be_had_raises_that_and_holds_nothing(
    runtime: Runtime,
) -> None:
    from mercato.db.aio_postgres import PostgresDatabase, _Pool

    class Unreachable(_Pool):
        async def _connect(self) -> Any:
            raise OSError("refused")

    class Failing(PostgresDatabase):
        def _pool(self) -> Any:
            pool = super()._pool()
            pool.__class__ = Unreachable
            return pool

    adb = Failing(runtime.db)

    async def scenario() -> int:
        with pytest.raises(OperationalError):
            async with adb.read() as conn:
                await conn.execute(Rows(_PID))
        return adb._pool()._slots._value

    assert run_on_fresh_loop(scenario()) == adb._max_size  # every slot free again


# --- SQLite: a read that reads nothing, a program's values -----------------------------------


@pytest.mark.sqlite_only
def test_a_read_that_sends_nothing_takes_no_connection(runtime: Runtime, probe: Table) -> None:
    from mercato.db.aio_sqlite import SqliteDatabase

    opened: list[object] = []

    class Counting(SqliteDatabase):
        def _connect(self) -> sqlite3.Connection:
            raw = super()._connect()
            opened.append(raw)
            return raw

    adb = Counting(runtime.db)
    runtime.db.engine.dispose()
    with runtime.db.transaction() as session:
        session.execute(insert(PROBE).values(id="there", name="n"))

    async def scenario() -> tuple[int, int, tuple[Any, ...]]:
        async with adb.read() as conn:
            pass  # a warm invoke's read: everything from memory
        before = len(opened)
        async with adb.read() as conn:
            row = (await conn.execute(Rows(_BY_ID, {"id": "there"})))[0]
        await adb.close()
        return before, len(opened), row

    before, after, row = run_on_fresh_loop(scenario())
    assert (before, after) == (0, 1)
    assert row[:2] == ("there", "n")


def test_a_programs_own_values_are_bound_per_run_and_no_input_replaces_them(
    runtime: Runtime, probe: Table
) -> None:
    """A step's literals (`> 3` below) and a bind whose value is made per run are the
    statement's, whatever the inputs are named; the inputs and the columns of earlier steps
    are bound by name (the SQLite steps pick them from one dict per run)."""
    made = iter(range(100, 200))

    def put(refs: guarded.Refs) -> Any:
        values = {
            "id": refs.param("id", String),
            "name": refs.param("name", String),
            "small": bindparam("made", callable_=lambda: next(made), type_=Integer),
        }
        return guarded.insert_select(refs, PROBE, values, refs.param("n", Integer) > 3).returning(
            PROBE.c.id, PROBE.c.small
        )

    def echo(refs: guarded.Refs) -> Any:
        values = {
            "id": refs.col("put", "id") + "-echo",
            "name": refs.param("name", String) + "!",
            "big": refs.col("put", "small"),
        }
        small = refs.col("put", "small")
        return guarded.insert_select(refs, PROBE, values, small >= 100).returning(
            PROBE.c.name, PROBE.c.big
        )

    program = guarded.Program(
        "probe-put",
        (guarded.Step("put", put, guarded.Empty.STOP), guarded.Step("echo", echo)),
        outputs=(("echo", "name"), ("echo", "big")),
    )

    mimics: dict[str, Any] = {}

    async def scenario() -> list[dict[str, Any] | None]:
        out = []
        for key, n in (("a", 4), ("b", 5), ("c", 3)):
            async with runtime.adb.transaction() as conn:
                params = {**mimics, "id": key, "name": key, "n": n, "s_put_id": "x"}
                out.append(await conn.execute(Run(program, params)))
        return out

    if runtime.adb.dialect == "sqlite":  # inputs named as the steps keep their literals
        literals = runtime.adb.program(program).literals.consts  # type: ignore[attr-defined]
        assert sorted(map(str, literals.values())) == ["!", "-echo", "100", "3"]
        mimics.update(dict.fromkeys(literals, 0))
    assert run_on_fresh_loop(scenario()) == [
        {"echo.name": "a!", "echo.big": 100},
        {"echo.name": "b!", "echo.big": 101},
        None,  # 3 > 3 is false, whatever an input named like the literal said
    ]
    with runtime.db.read() as session:
        rows = session.execute(select(PROBE.c.id, PROBE.c.small).order_by(PROBE.c.id)).all()
    assert [tuple(row) for row in rows] == [
        ("a", 100),
        ("a-echo", None),
        ("b", 101),
        ("b-echo", None),
    ]


@pytest.mark.sqlite_only
def test_a_value_bound_in_several_places_is_processed_once_per_run(
    runtime: Runtime, probe: Table
) -> None:
    """SQLite's datetime bind processor formats a string per call: a program binds its `now`
    (and a row's timestamps that are that `now`) in several steps, and each object is
    processed once per run and type; the next run processes its own values."""
    from sqlalchemy import TypeDecorator

    processed: list[Any] = []

    class Counted(TypeDecorator[dt.datetime]):
        impl = UTCDateTime
        cache_ok = True

        def process_bind_param(self, value: Any, dialect: Any) -> Any:
            processed.append(value)
            return value

    def put(suffix: str) -> Callable[[guarded.Refs], Any]:
        def build(refs: guarded.Refs) -> Any:
            values = {
                "id": refs.param("id", String) + suffix,
                "name": refs.param("name", String),
                "at": refs.param("at", Counted),
            }
            return guarded.insert_select(refs, PROBE, values).returning(PROBE.c.id)

        return build

    def stamp(refs: guarded.Refs) -> Any:  # the same object under another input name
        values = {
            "id": refs.col("one", "id") + "-again",
            "name": refs.param("name", String),
            "at": refs.param("also", Counted),
        }
        return guarded.insert_select(refs, PROBE, values).returning(PROBE.c.id)

    program = guarded.Program(
        "probe-stamps",
        (
            guarded.Step("one", put("-1")),
            guarded.Step("two", put("-2")),
            guarded.Step("three", stamp),
        ),
    )
    first = dt.datetime(2026, 5, 1, 10, 30, tzinfo=_PARIS)
    second = dt.datetime(2026, 5, 2, 11, 0, tzinfo=dt.UTC)

    async def scenario() -> None:
        for key, at in (("a", first), ("b", second)):
            async with runtime.adb.transaction() as conn:
                await conn.execute(Run(program, {"id": key, "name": key, "at": at, "also": at}))

    run_on_fresh_loop(scenario())
    assert processed == [first, second]  # once per run, not once per place
    with runtime.db.read() as session:
        rows = session.execute(select(PROBE.c.id, PROBE.c.at).order_by(PROBE.c.id)).all()
    assert [tuple(row) for row in rows] == [
        ("a-1", first),
        ("a-1-again", first),
        ("a-2", first),
        ("b-1", second),
        ("b-1-again", second),
        ("b-2", second),
    ]


def test_a_unit_whose_start_fails_leaves_the_id_source_as_it_was(runtime: Runtime) -> None:
    """Every unit binds the Runtime's id source for its block; one whose start fails (here a
    listener refusing it) must give the caller's context back as it found it."""
    from mercato.core import ids
    from mercato.db.aio import observing

    def refuse(kind: str, detail: str) -> None:
        if kind == "unit":
            raise RuntimeError("refused at the start")

    async def scenario() -> list[bool]:
        before = ids._current.get()
        kept = []
        for unit in (runtime.adb.read, runtime.adb.transaction, runtime.adb.statement):
            with observing(runtime.adb, refuse), pytest.raises(RuntimeError):
                async with unit():
                    pass
            kept.append(ids._current.get() is before)
        return kept

    source = runtime.db.ids
    runtime.db.ids = SystemIds()  # a source of its own, so that a leaked binding shows
    try:
        assert run_on_fresh_loop(scenario()) == [True, True, True]
    finally:
        runtime.db.ids = source
