"""Money programs of concurrent `statement()` units (decisions 0370, 0440, 0455).

On PostgreSQL the programs of one SQL text waiting together go pipelined and commit in one
implicit transaction (one WAL flush for all), taking the money lock exclusively; when the
server refuses that transaction, each of its programs gets its own answer alone. Whatever the
grouping, every caller gets the answer it would get alone, and the ledger is the one a serial
run leaves. On SQLite a loop's queued programs run one after another in one transaction,
each in a savepoint (decision 0455); the same outcomes are asserted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, String, func, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import utcnow
from mercato.db import guarded
from mercato.db.aio import observing
from mercato.db.aio_postgres import GROUP_MAX
from mercato.db.plans import Run
from mercato.db.runtime import Runtime
from mercato.ledger import checks, rules
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerAccount, Reservation

CALLS = 2 * GROUP_MAX + 5
POINTS = GROUP_MAX + 3


def _reserve(account: str, reference: str) -> Run:
    return Run(
        ledger._RESERVE,
        {
            "reservation_id": f"res_{reference}",
            "account_id": account,
            "amount": 1,
            "reference": reference,
            "now": utcnow(),
        },
    )


async def _one(runtime: Runtime, op: Run) -> Any:
    try:
        async with runtime.adb.statement() as conn:
            return await conn.execute(op)
    except (guarded.Refused, IntegrityError) as error:
        return error


def test_concurrent_programs_get_their_own_answers_and_the_ledger_a_serial_run(
    runtime: Runtime,
) -> None:
    account = make_account(runtime.db, "grouped@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=POINTS, now=utcnow())
    # One reference twice: the second of the two is a unique violation (or short).
    ops = [_reserve(account, f"ref-{i}") for i in range(CALLS)] + [_reserve(account, "ref-3")]
    ops[-1].params["reservation_id"] = "res_twin"
    sent: list[str] = []

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(*(_one(runtime, op) for op in ops)))

    with observing(runtime.adb, lambda kind, detail: sent.append(detail)):
        answers = run_on_fresh_loop(scenario())

    done = [a for a in answers if isinstance(a, dict)]
    short = [a for a in answers if isinstance(a, guarded.Refused)]
    twins = [a for a in answers if isinstance(a, IntegrityError)]
    assert len(done) == POINTS
    assert all(a.code == "short" for a in short)
    assert len(done) + len(short) + len(twins) == len(ops) and len(twins) <= 1
    with runtime.db.read() as session:
        held = session.scalar(select(func.count()).select_from(Reservation))
        balances = ledger.balances(session, account_id=account)
        report = checks.run_checks(session)
    assert held == POINTS
    assert (balances.available, balances.reserved) == (0, POINTS)
    assert report.balanced, report.problems
    if runtime.db.engine.dialect.name == "postgresql":
        groups = [s for s in sent if _EXCLUSIVE in s]
        alone = [s for s in sent if _SHARED in s]
        assert groups, "no group formed"
        # the refusals after the last point rolled their group back: its programs ran alone
        assert len(alone) >= GROUP_MAX
        assert len(groups) < len(ops)


def test_a_program_alone_is_one_round_trip_without_begin(runtime: Runtime) -> None:
    account = make_account(runtime.db, "alone@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=1, now=utcnow())
    sent: list[tuple[str, str]] = []

    async def scenario() -> Any:
        return await _one(runtime, _reserve(account, "alone"))

    with observing(runtime.adb, lambda kind, detail: sent.append((kind, detail))):
        answer = run_on_fresh_loop(scenario())
    assert isinstance(answer, dict)
    if runtime.db.engine.dialect.name == "postgresql":
        assert [kind for kind, _ in sent] == ["unit", "sql"]
        assert sent[1][1].startswith("WITH mercato_money AS")


@pytest.mark.postgres_only
def test_a_program_with_nothing_in_flight_runs_in_its_callers_task(runtime: Runtime) -> None:
    # No task to start and no future to wake for a lone program (what one client waits for);
    # programs submitted while it is in flight still wait for it and then go as a group.
    account = make_account(runtime.db, "inline@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=GROUP_MAX, now=utcnow())
    ops = [_reserve(account, f"i-{i}") for i in range(GROUP_MAX)]
    tasks: list[tuple[str, asyncio.Task[Any] | None]] = []

    def told(kind: str, detail: str) -> None:
        if kind == "sql":
            tasks.append((detail, asyncio.current_task()))

    async def scenario() -> tuple[asyncio.Task[Any] | None, list[Any]]:
        callers = [asyncio.ensure_future(_one(runtime, op)) for op in ops]
        answers = list(await asyncio.gather(*callers))
        return callers[0], answers

    with observing(runtime.adb, told):
        first, answers = run_on_fresh_loop(scenario())

    assert all(isinstance(a, dict) for a in answers), answers
    assert tasks[0][1] is first  # the first program, alone: sent by its caller's own task
    assert _SHARED in tasks[0][0]
    rest = tasks[1:]
    assert rest and all(_EXCLUSIVE in sql for sql, _ in rest)  # the others: a group after it
    assert len(rest) < len(ops) - 1
    with runtime.db.read() as session:
        assert ledger.balances(session, account_id=account).reserved == GROUP_MAX
        assert checks.run_checks(session).balanced


def test_a_group_sends_the_programs_of_one_sql_text_together(runtime: Runtime) -> None:
    # Pipelined (asyncpg `fetchmany`): one send for all of a group's programs of one text,
    # each still getting its own answer.
    account = make_account(runtime.db, "pipelined@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=GROUP_MAX, now=utcnow())
    ops = [_reserve(account, f"p-{i}") for i in range(GROUP_MAX)]
    sent: list[str] = []

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(*(_one(runtime, op) for op in ops)))

    with observing(runtime.adb, lambda kind, detail: sent.append(detail)):
        answers = run_on_fresh_loop(scenario())

    assert all(isinstance(a, dict) for a in answers), answers
    with runtime.db.read() as session:
        assert ledger.balances(session, account_id=account).reserved == GROUP_MAX
        assert checks.run_checks(session).balanced
    if runtime.db.engine.dialect.name == "postgresql":
        programs = [s for s in sent if s.startswith("WITH mercato_money AS")]
        assert any(_EXCLUSIVE in s for s in programs)  # a group: the money lock exclusive
        # its one transaction is implicit (one Sync): no round trip for BEGIN or COMMIT, so
        # the lock is never held while the server waits for this process (decision 0440)
        assert not [s for s in sent if s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]
        assert len(programs) < len(ops)  # sent once per group, not once per program


def _entry(leg: str) -> Any:
    def build(refs: guarded.Refs) -> Any:
        values = {
            "id": refs.param(f"entry_{leg}", String),
            "transfer_id": refs.param("transfer", String),
            "ledger_account_id": refs.param("ledger_account", String),
            "amount": refs.param(f"amount_{leg}", BigInteger),
        }
        return guarded.insert_select(refs, rules.ENTRIES, values).returning(rules.ENTRIES.c.id)

    return build


# Two entries on one transfer: balanced when the amounts cancel, refused at COMMIT (a deferred
# check) when they do not. One SQL text either way.
_ENTRIES = guarded.Program(
    "test-two-entries", (guarded.Step("a", _entry("a")), guarded.Step("b", _entry("b")))
)
_EXCLUSIVE = f"pg_advisory_xact_lock({guarded.MONEY_LOCK})"
_SHARED = f"pg_advisory_xact_lock_shared({guarded.MONEY_LOCK})"


@pytest.mark.postgres_only
def test_a_group_whose_commit_is_refused_runs_each_program_alone(runtime: Runtime) -> None:
    # One program of a group leaves a transfer unbalanced: the deferred check refuses the
    # group's commit. Each program of that group then runs alone: only that one fails; the
    # reserves (another SQL text: another group, another transaction) are not touched.
    account = make_account(runtime.db, "commit@example.com")
    with runtime.db.transaction() as session:
        transfer = ledger.grant(session, account_id=account, amount=POINTS, now=utcnow())
        ledger_account = session.scalar(
            select(LedgerAccount.id).where(
                LedgerAccount.owner == account, LedgerAccount.kind == "available"
            )
        )

    def entries(name: str, a: int, b: int) -> Run:
        return Run(
            _ENTRIES,
            {
                "entry_a": f"ent_{name}_a",
                "entry_b": f"ent_{name}_b",
                "transfer": transfer,
                "ledger_account": ledger_account,
                "amount_a": a,
                "amount_b": b,
            },
        )

    ops = [_reserve(account, f"c-{i}") for i in range(5)]
    ops += [entries("good", 7, -7), entries("bad", 7, -6)]
    sent: list[str] = []

    async def scenario() -> list[Any]:
        async def one(op: Run) -> Any:
            try:
                return await _one(runtime, op)
            except DBAPIError as error:
                return error

        return list(await asyncio.gather(*(one(op) for op in ops)))

    with observing(runtime.adb, lambda kind, detail: sent.append(detail)):
        answers = run_on_fresh_loop(scenario())

    assert all(isinstance(a, dict) for a in answers[:6]), answers
    assert isinstance(answers[6], DBAPIError) and "does not balance" in str(answers[6])
    programs = [s for s in sent if s.startswith("WITH mercato_money AS")]
    entry_sends = [s for s in programs if "reserve_hold" not in s]  # the reserves' first step
    grouped = [s for s in entry_sends if _EXCLUSIVE in s]
    assert len(grouped) == 1  # the one group, refused: then each of its two alone
    assert len(entry_sends) - len(grouped) == 2
    with runtime.db.read() as session:
        assert checks.run_checks(session).balanced
        assert ledger.balances(session, account_id=account).reserved == 5


def _wal_frames(runtime: Runtime) -> int:
    """The frames in the SQLite WAL (each commit writes every page it changed once)."""
    path = Path(str(runtime.db.engine.url.database))
    with runtime.db.read() as session:
        page = int(session.execute(text("PRAGMA page_size")).scalar_one())
    wal = path.with_name(path.name + "-wal")
    return max(wal.stat().st_size - 32, 0) // (page + 24) if wal.exists() else 0


@pytest.mark.sqlite_only
def test_sqlite_commits_the_programs_queued_on_a_loop_once(runtime: Runtime) -> None:
    # One writer: the money programs of a loop's concurrent `statement()` units run in one
    # transaction (decision 0455), so the pages they share (the caller's balances, the
    # tables' last leaves) go to the WAL once, not once per program.
    account = make_account(runtime.db, "sqlite-group@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=GROUP_MAX, now=utcnow())
    calls = 8

    async def scenario(tag: str, n: int) -> list[Any]:
        ops = [_reserve(account, f"{tag}-{i}") for i in range(n)]
        return list(await asyncio.gather(*(_one(runtime, op) for op in ops)))

    # Frames appended (nothing checkpoints in between: the async connections' threshold
    # is 10,000 pages, decision 0436).
    before = _wal_frames(runtime)
    assert all(isinstance(a, dict) for a in run_on_fresh_loop(scenario("one", 1)))
    one = _wal_frames(runtime) - before
    before += one
    assert all(isinstance(a, dict) for a in run_on_fresh_loop(scenario("many", calls)))
    many = _wal_frames(runtime) - before
    assert one > 0 and many < 2 * one  # one commit per program would write `calls` × `one`
    with runtime.db.read() as session:
        assert ledger.balances(session, account_id=account).reserved == calls + 1
        assert checks.run_checks(session).balanced


@pytest.mark.sqlite_only
def test_sqlite_groups_journal_their_savepoints_in_memory(runtime: Runtime) -> None:
    # A group's savepoints journal every page their programs change; past 64 KiB SQLite
    # spilled that journal to a temp file of its own, opened and written for every group.
    from mercato.db.aio_sqlite import SqliteDatabase

    raw = SqliteDatabase(runtime.db)._connect()
    try:
        assert raw.execute("PRAGMA temp_store").fetchone() == (2,)  # MEMORY
    finally:
        raw.close()
