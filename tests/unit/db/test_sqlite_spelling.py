"""The SQLite spelling of the money programs (decision 0490): a write runs without RETURNING
(SQLite gathers a RETURNING's rows in an ephemeral table, and an INSERT … SELECT with one
stages its SELECT in another), its row count saying whether the step wrote. The empty-step
meanings must hold as they did: STOP on a same-key twin and on a lost lease, REFUSE on a short
balance, a resolved reservation and a full quota window, SKIP on a zero leg; and the row a
later step reads is the one written (an upsert's: the account it inserted or updated)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import String, select
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from builders.event_loops import run_on_fresh_loop
from builders.invocations import invocable_version
from builders.ledger import ledger_account
from mercato.core.clock import utcnow
from mercato.db import guarded, runner
from mercato.db.plans import Run
from mercato.db.runtime import Runtime
from mercato.db.uow import Database
from mercato.invocations import money
from mercato.invocations import service as invocations
from mercato.invocations.models import Invocation, InvocationAttempt
from mercato.invocations.schemas import Address
from mercato.ledger import service as ledger
from mercato.ledger.errors import InsufficientPoints, ReservationAlreadyResolved
from mercato.ledger.lines import lines
from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.ledger.schemas import PLATFORM, AccountKind, TransferKind
from mercato.quotas import service as quotas
from mercato.quotas.errors import RateLimitExceeded
from mercato.quotas.models import QuotaWindow
from mercato.quotas.schemas import Policy

pytestmark = pytest.mark.sqlite_only

PROGRAMS = [
    money.ACCEPT,
    money.SETTLE,
    money.RELEASE,
    money.RESOLVE_SETTLE,
    money.RESOLVE_RELEASE,
    ledger._RESERVE,
    ledger._SETTLE,
    ledger._RELEASE,
    ledger._REFUND,
    ledger._transfer_program(
        TransferKind.GRANT, ((AccountKind.ISSUANCE, True), (AccountKind.AVAILABLE, False))
    ),
    ledger._transfer_program(
        TransferKind.PAYOUT, ((AccountKind.EARNINGS, True), (AccountKind.ISSUANCE, False))
    ),
    quotas._TAKE,
]


def _opened(raw: sqlite3.Connection, compiled: Any) -> list[tuple[Any, ...]]:
    """The OpenEphemeral opcodes of `compiled`'s program: a table (no key info) for a
    RETURNING or an INSERT's staged SELECT, an index for an IN list of constants (a CHECK's, a
    WHERE's)."""
    values = [None] * len(compiled.positiontup or ())
    program = raw.execute("EXPLAIN " + compiled.string, values).fetchall()
    return [op for op in program if op[1] == "OpenEphemeral"]


def _statements(
    db: Database, program: guarded.Program
) -> Iterator[tuple[sqlite3.Connection, guarded.CompiledStep, Any]]:
    """Every SQLite statement of `program` (each step's write, read, `required_if`, `detail`),
    compiled, with a connection to the migrated test database to EXPLAIN it on."""
    dialect = SQLiteDialect_pysqlite(paramstyle="qmark")
    raw = sqlite3.connect(db.engine.url.database or "")
    try:
        for item in guarded.compiled(program, "sqlite").steps:
            for clause in (item.statement, item.read, item.required_if, item.detail):
                if clause is not None:
                    yield raw, item, clause.compile(dialect=dialect)
    finally:
        raw.close()


_STAGED = {("invocation-accept", "intent"): 1}
"""The one step that stages its row in an ephemeral table: SQLite runs an INSERT … SELECT into a
table with triggers through one (`useTempTable` in its insert.c), and `invocations` has the
worker queue's AFTER INSERT trigger (migration 0023, decision 0602). One row, a few VDBE ops;
the alternated bench measured SQLite's invokes 1.14× the tree before issue 43 with it."""


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.name)
def test_no_money_step_opens_an_ephemeral_table(db: Database, program: guarded.Program) -> None:
    for raw, item, compiled in _statements(db, program):
        assert "RETURNING" not in compiled.string, (item.step.name, compiled.string)
        assert " IN (" not in compiled.string, (item.step.name, compiled.string)
        tables = [op for op in _opened(raw, compiled) if not op[5]]
        assert len(tables) == _STAGED.get((program.name, item.step.name), 0), (
            item.step.name,
            compiled.string,
        )
        # Every write of the money programs is counted (the guard SELECT is not a write).
        assert item.counted or item.statement.is_select, item.step.name


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda program: program.name)
def test_no_money_step_opens_an_ephemeral_index(db: Database, program: guarded.Program) -> None:
    """Nor an ephemeral index: the tables' CHECKs spell their lists as comparisons (migration
    0016, decision 0493); `CHECK (x IN (…three or more…))` built one on every row checked."""
    for raw, item, compiled in _statements(db, program):
        indexes = [op for op in _opened(raw, compiled) if op[5]]
        assert not indexes, (item.step.name, compiled.string, indexes)


@pytest.mark.parametrize("value", [None, "DISPATCHING", "RECONCILING", "SUCCEEDED"])
def test_an_in_list_spelled_as_comparisons_keeps_its_truth(value: str | None) -> None:
    """`x IN (a, b, c)` and its SQLite spelling agree on every x, NULL included."""
    from sqlalchemy import bindparam

    x = bindparam("x", type_=String)
    listed = x.in_([guarded.inline(v) for v in ("DISPATCHING", "RETRY_WAIT", "RECONCILING")])
    dialect = SQLiteDialect_pysqlite(paramstyle="named")
    spelled = guarded._in_lists(select(listed.label("v")))
    assert " IN (" not in str(spelled.compile(dialect=dialect))
    raw = sqlite3.connect(":memory:")
    try:
        answers = [
            raw.execute(str(statement.compile(dialect=dialect)), {"x": value}).fetchone()
            for statement in (select(listed.label("v")), spelled)
        ]
    finally:
        raw.close()
    assert answers[0] == answers[1]


def test_a_write_keeps_its_returning_where_its_row_cannot_be_named() -> None:
    """An UPDATE whose WHERE pins no unique key cannot be read back: it keeps RETURNING."""
    from sqlalchemy import update

    accounts = LedgerAccount.__table__

    def loose(refs: guarded.Refs) -> Any:
        return (
            update(accounts)
            .where(accounts.c.kind == guarded.inline("revenue"))  # type: ignore[attr-defined]
            .values(balance=accounts.c.balance)  # type: ignore[attr-defined]
            .returning(accounts.c.id)  # type: ignore[attr-defined]
        )

    program = guarded.Program(
        "loose", (guarded.Step("loose", loose, guarded.Empty.SKIP),), (("loose", "id"),)
    )
    (item,) = guarded.compile_program(program, "sqlite").steps
    assert not item.counted and item.columns == ("id",)


# --- the empty-step meanings, on the sync side and on the async driver --------------------


def _run(runtime: Runtime, side: str, program: guarded.Program, params: dict[str, Any]) -> Any:
    if side == "sync":
        with runtime.db.statement() as session:
            return runner.run(session, program, params)

    async def go() -> Any:
        async with runtime.adb.statement() as conn:
            return await conn.execute(Run(program, params))

    return run_on_fresh_loop(go())


SIDES = pytest.mark.parametrize("side", ["sync", "async"])


def _funded(runtime: Runtime, amount: int) -> str:
    caller = ledger_account(runtime.db, "caller")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=caller, amount=amount, now=utcnow())
    return caller


def _reserve(caller: str, amount: int, name: str) -> dict[str, Any]:
    return {
        "reservation_id": f"res_{name}",
        "account_id": caller,
        "amount": amount,
        "reference": f"ref-{name}",
        "now": utcnow(),
    }


def _book(runtime: Runtime) -> tuple[Any, ...]:
    with runtime.db.read() as session:
        return tuple(
            session.execute(select(table).order_by(*table.primary_key.columns)).all()
            for table in (
                LedgerAccount.__table__,
                LedgerTransfer.__table__,
                LedgerEntry.__table__,
                Reservation.__table__,
                QuotaWindow.__table__,
                Invocation.__table__,
            )
        )


@SIDES
def test_a_short_balance_refuses_and_writes_nothing(runtime: Runtime, side: str) -> None:
    caller = _funded(runtime, 10)
    before = _book(runtime)
    with pytest.raises(guarded.Refused) as refused:
        _run(runtime, side, ledger._RESERVE, _reserve(caller, 11, f"short_{side}"))
    assert (refused.value.code, refused.value.detail) == ("short", ("10", "11"))
    assert _book(runtime) == before
    done = _run(runtime, side, ledger._RESERVE, _reserve(caller, 10, f"all_{side}"))
    assert done == {}
    with runtime.db.read() as session:
        assert ledger.balances(session, account_id=caller).available == 0
        assert ledger.verify(session).balanced


@SIDES
def test_a_resolved_reservation_refuses_with_its_state(runtime: Runtime, side: str) -> None:
    caller = _funded(runtime, 10)
    _run(runtime, side, ledger._RESERVE, _reserve(caller, 4, side))
    params = {"reservation_id": f"res_{side}", "now": utcnow()}
    _run(runtime, side, ledger._RELEASE, params)
    before = _book(runtime)
    for program in (ledger._RELEASE, ledger._SETTLE):
        given = dict(params, provider_account_id=caller, share_bps=5000)
        if program is ledger._RELEASE:
            given = params
        with pytest.raises(guarded.Refused) as refused:
            _run(runtime, side, program, given)
        assert (refused.value.code, refused.value.detail) == ("resolved", ("RELEASED",))
    assert _book(runtime) == before
    with pytest.raises(guarded.Refused) as missing:
        _run(runtime, side, ledger._RELEASE, {"reservation_id": "res_missing", "now": utcnow()})
    assert (missing.value.code, missing.value.detail) == ("resolved", (None,))


def _entries(runtime: Runtime, reservation_id: str, kind: TransferKind) -> set[tuple[str, int]]:
    """(owner:kind, amount) of the ledger lines of the reservation's `kind` movement (a
    reservation records its reserve and settle legs itself: `mercato.ledger.lines`)."""
    line = lines()
    with runtime.db.read() as session:
        rows = session.execute(
            select(line.c.owner, line.c.account_kind, line.c.amount).where(
                line.c.reference == reservation_id, line.c.transfer_kind == kind.value
            )
        ).all()
    return {(f"{owner}:{kind}", amount) for owner, kind, amount in rows}


@SIDES
@pytest.mark.parametrize(
    ("share_bps", "provider", "platform"), [(0, 0, 9), (10_000, 9, 0), (5000, 4, 5)]
)
def test_a_zero_leg_is_skipped_and_each_entry_names_its_account(
    runtime: Runtime, side: str, share_bps: int, provider: int, platform: int
) -> None:
    caller = _funded(runtime, 20)
    earner = ledger_account(runtime.db, "provider")
    for n in range(2):  # the provider's earnings account: created, then updated
        name = f"{side}_{share_bps}_{n}"
        _run(runtime, side, ledger._RESERVE, _reserve(caller, 9, name))
        settle = {
            "reservation_id": f"res_{name}",
            "provider_account_id": earner,
            "share_bps": share_bps,
            "now": utcnow(),
        }
        assert _run(runtime, side, ledger._SETTLE, settle) == {}
        expected = {(f"{caller}:reserved", -9)}
        if provider:
            expected.add((f"{earner}:earnings", provider))
        if platform:
            expected.add((f"{PLATFORM}:revenue", platform))
        assert _entries(runtime, f"res_{name}", TransferKind.SETTLE) == expected
        assert _entries(runtime, f"res_{name}", TransferKind.RESERVE) == {
            (f"{caller}:available", -9),
            (f"{caller}:reserved", 9),
        }
    with runtime.db.read() as session:
        assert ledger.balances(session, account_id=earner).earnings == 2 * provider
        assert ledger.balances(session, account_id=caller).available == 2
        assert ledger.verify(session).balanced


@SIDES
def test_a_full_quota_window_refuses_and_takes_nothing(runtime: Runtime, side: str) -> None:
    caller = ledger_account(runtime.db, "quota")
    params = {"account_id": caller, "policy": "p", "window_start": 60, "limit": 2}
    assert _run(runtime, side, quotas._TAKE, params) == {"quota.accepted": 1}
    assert _run(runtime, side, quotas._TAKE, params) == {"quota.accepted": 2}
    with pytest.raises(guarded.Refused) as refused:
        _run(runtime, side, quotas._TAKE, params)
    assert refused.value.code == quotas.EXHAUSTED
    assert _run(runtime, side, quotas._TAKE, dict(params, window_start=120)) == {
        "quota.accepted": 1
    }


ADDRESS = Address(
    connection_revision=1, base_url="https://p.example/v1", credential_digest="d" * 64
)


def _accept(
    db: Database, invocation_id: str, caller: str, key: str, now: dt.datetime, provider: str
) -> Any:
    with db.statement() as session:
        return invocations.accept(
            session,
            invocation_id=invocation_id,
            account_id=caller,
            channel="API_KEY",
            idempotency_key=key,
            fingerprint="f" * 64,
            version=invocable_version(provider_account_id=provider, name="spelling"),
            payload=b'{"n": 1}',
            policy=Policy(name="spelling", limit=5, window_seconds=60),
            address=ADDRESS,
            lease_owner=f"lease_{invocation_id}",
            lease_seconds=30,
            now=now,
        )


def _succeed(db: Database, invocation_id: str, lease_owner: str, now: dt.datetime) -> Any:
    with db.statement() as session:
        return invocations.finish_success(
            session,
            invocation_id=invocation_id,
            lease_owner=lease_owner,
            result=b'{"ok": true}',
            artifacts=None,
            now=now,
        )


def test_a_same_key_twin_stops_and_a_lost_lease_stops(runtime: Runtime) -> None:
    db = runtime.db
    caller = _funded(runtime, 20)
    provider = ledger_account(db, "provider")
    now = utcnow()
    first = _accept(db, "inv_spelling_a", caller, "key-a", now, provider)
    assert first is not None and first.accepted == 1
    before = _book(runtime)
    assert (
        _accept(db, "inv_spelling_b", caller, "key-a", now, provider) is None
    )  # STOP: nothing written
    assert _book(runtime) == before
    with db.read() as session:
        attempts = session.execute(select(InvocationAttempt.invocation_id)).scalars().all()
        assert attempts == ["inv_spelling_a"]
        assert ledger.balances(session, account_id=caller).reserved == 7
    lost = _succeed(db, "inv_spelling_a", "lease_someone_else", now)
    assert lost is None  # STOP: the lease was not ours
    assert _book(runtime) == before
    done = _succeed(db, "inv_spelling_a", "lease_inv_spelling_a", now)
    assert done is not None and done.invocation_id == "inv_spelling_a" and done.state == "SUCCEEDED"
    with db.read() as session:
        assert ledger.balances(session, account_id=caller).reserved == 0
        assert ledger.verify(session).balanced


def test_errors_the_services_map_are_unchanged(runtime: Runtime) -> None:
    caller = _funded(runtime, 5)
    with runtime.db.transaction() as session, pytest.raises(InsufficientPoints):
        ledger.reserve(session, account_id=caller, amount=6, reference="r", now=utcnow())
    with runtime.db.transaction() as session:
        held = ledger.reserve(session, account_id=caller, amount=5, reference="r", now=utcnow())
        ledger.release(session, reservation_id=held, now=utcnow())
    with runtime.db.transaction() as session, pytest.raises(ReservationAlreadyResolved):
        ledger.release(session, reservation_id=held, now=utcnow())
    policy = Policy(name="tight", limit=1, window_seconds=60)
    with runtime.db.transaction() as session:
        quotas.take_slot(session, account_id=caller, policy=policy, now=utcnow())
    with runtime.db.transaction() as session, pytest.raises(RateLimitExceeded):
        quotas.take_slot(session, account_id=caller, policy=policy, now=utcnow())
