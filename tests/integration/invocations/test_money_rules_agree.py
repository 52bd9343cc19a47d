"""The two stores agree (decision 0240): one scripted sequence of accepts, settles, releases,
staff resolutions, refunds, grants, payouts and a key's spend limit, refusals included, run
through the production services on SQLite and on PostgreSQL, leaves the same ledger (accounts,
transfers with their entries, reservations), the same invocations and attempts, the same quota
windows and the same keys' use, and answers every step the same way."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from builders.invocations import invocable_version
from mercato.accounts.models import Account, ApiKey
from mercato.catalog.schemas import InvocableVersion
from mercato.core.errors import MercatoError
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.invocations import service as invocations
from mercato.invocations import spend
from mercato.invocations.models import Invocation, InvocationAttempt
from mercato.invocations.schemas import Address, Decision
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.quotas.models import QuotaWindow
from mercato.quotas.schemas import Policy

START = dt.datetime(2026, 5, 1, 9, 0, tzinfo=dt.UTC)
CALLER, POOR, PROVIDER = "acc_caller", "acc_poor", "acc_provider"
AGENT, OTHER_KEY = "key_agent", "key_other"
POLICY = Policy(name="script", limit=3, window_seconds=60)
ADDRESS = Address(
    connection_revision=1, base_url="https://provider.example/v1", credential_digest="d" * 64
)


def _version(label: str, price: int, share_bps: int) -> InvocableVersion:
    return invocable_version(
        provider_account_id=PROVIDER, label=label, price=price, share_bps=share_bps
    )


V70, V33, V0, V100 = (
    _version("v1", 10, 7000),
    _version("v2", 7, 3333),
    _version("v3", 9, 0),
    _version("v4", 4, 10_000),
)


class Script:
    """Runs the steps on one store, each in the unit of work production uses for it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.now = START
        self.outcomes: list[tuple[str, str]] = []

    def tick(self, seconds: int = 1) -> dt.datetime:
        self.now += dt.timedelta(seconds=seconds)
        return self.now

    def step(self, label: str, work: Callable[[], Any]) -> None:
        try:
            result = work()
        except MercatoError as error:
            outcome = error.code
        except IntegrityError:
            outcome = "integrity-error"
        else:
            outcome = "none" if result is None else "ok"
        self.outcomes.append((label, outcome))

    def accept(
        self,
        invocation_id: str,
        account: str,
        version: InvocableVersion,
        key: str,
        api_key_id: str | None = None,
    ) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.statement() as session:
                return invocations.accept(
                    session,
                    invocation_id=invocation_id,
                    account_id=account,
                    channel="API_KEY",
                    idempotency_key=key,
                    fingerprint="f" * 64,
                    version=version,
                    payload=b'{"n": 1}',
                    policy=POLICY,
                    address=ADDRESS,
                    lease_owner=f"lease_{invocation_id}",
                    lease_seconds=30,
                    now=now,
                    api_key_id=api_key_id,
                )

        self.step(f"accept {invocation_id}", work)

    def limit(self, key_id: str, points: int, period: spend.Period) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                return spend.set_limit(
                    session, key_id=key_id, account_id=None, limit=(points, period), now=now
                )

        self.step(f"limit {key_id} {points} {period.value}", work)

    def settle(self, invocation_id: str, owner: str | None = None) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.statement() as session:
                return invocations.finish_success(
                    session,
                    invocation_id=invocation_id,
                    lease_owner=owner or f"lease_{invocation_id}",
                    result=b'{"echo": 1}',
                    artifacts=None,
                    now=now,
                )

        self.step(f"settle {invocation_id}", work)

    def fail(self, invocation_id: str) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.statement() as session:
                return invocations.finish_failure(
                    session,
                    invocation_id=invocation_id,
                    lease_owner=f"lease_{invocation_id}",
                    error_code="PROVIDER_SAID_NO",
                    provider_http_status=422,
                    now=now,
                )

        self.step(f"fail {invocation_id}", work)

    def resolve(self, invocation_id: str, decision: Decision) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                return invocations.resolve(
                    session,
                    invocation_id=invocation_id,
                    decision=decision,
                    reason="staff checked with the provider",
                    actor="staff@example.com",
                    now=now,
                )

        self.step(f"resolve {invocation_id} {decision.value}", work)

    def refund(self, invocation_id: str) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                reservation = invocations.reservation_of(session, invocation_id=invocation_id)
                ledger.refund(session, reservation_id=reservation, now=now)
                invocations.mark_refunded(session, invocation_id=invocation_id, now=now)
            return True

        self.step(f"refund {invocation_id}", work)

    def settle_reservation_of(self, invocation_id: str) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                reservation = invocations.reservation_of(session, invocation_id=invocation_id)
                ledger.settle(
                    session,
                    reservation_id=reservation,
                    provider_account_id=PROVIDER,
                    provider_share_bps=5000,
                    now=now,
                )
            return True

        self.step(f"ledger settle {invocation_id}", work)

    def grant(self, account: str, points: int) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                return ledger.grant(session, account_id=account, amount=points, now=now, memo="g")

        self.step(f"grant {account} {points}", work)

    def payout(self, points: int) -> None:
        now = self.tick()

        def work() -> object:
            with self.db.transaction() as session:
                return ledger.payout(session, account_id=PROVIDER, amount=points, now=now)

        self.step(f"payout {points}", work)


def _run(db: Database) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    with db.transaction() as session:
        session.execute(
            insert(Account),
            [
                {"id": a, "email": f"{a}@example.com", "is_staff": False, "created_at": START}
                for a in (CALLER, POOR, PROVIDER)
            ],
        )
        session.execute(
            insert(ApiKey),
            [
                {
                    "id": k,
                    "account_id": CALLER,
                    "name": k,
                    "digest": k.ljust(64, "0"),
                    "created_at": START,
                }
                for k in (AGENT, OTHER_KEY)
            ],
        )
    s = Script(db)
    s.grant(CALLER, 100)
    s.grant(POOR, 5)
    s.accept("inv_1", CALLER, V70, "k1")
    s.accept("inv_2", CALLER, V33, "k2")
    s.accept("inv_twin", CALLER, V70, "k1")  # same key: the unique key refuses, nothing written
    s.accept("inv_3", POOR, V70, "k3")  # 5 points for a price of 10
    s.settle("inv_1")
    s.settle("inv_1")  # its lease is gone: nothing happens
    s.fail("inv_2")
    s.accept("inv_4", CALLER, V0, "k4")
    s.accept("inv_5", CALLER, V100, "k5")  # the fourth call in a window of three
    s.settle("inv_4", owner="lease_someone_else")
    s.settle("inv_4")  # a 0 % share: no earnings leg
    s.tick(60)
    s.accept("inv_6", CALLER, V100, "k6")  # a new window; a 100 % share
    s.resolve("inv_6", Decision.SUCCEEDED)  # staff settle it: no revenue leg
    s.resolve("inv_6", Decision.FAILED)  # already resolved
    s.refund("inv_1")
    s.refund("inv_1")  # already refunded
    s.payout(20)  # more than earned
    s.payout(4)
    s.refund("inv_6")  # the provider's earnings were paid out: blocked
    s.grant(POOR, 20)
    s.accept("inv_7", POOR, V70, "k7")
    s.resolve("inv_7", Decision.FAILED)  # staff release it
    s.refund("inv_2")  # released, never settled
    s.settle_reservation_of("inv_2")  # already resolved
    # A key's spend limit: counted at accept, refused past it, given back by a release.
    s.tick(60)
    s.accept("inv_8", CALLER, V70, "k8", api_key_id=AGENT)  # before the limit: counted later
    s.limit(AGENT, 17, spend.Period.DAY)  # the use starts at 10
    s.accept("inv_9", CALLER, V33, "k9", api_key_id=AGENT)  # 17 of 17
    s.accept("inv_10", CALLER, V100, "k10", api_key_id=AGENT)  # 21 of 17
    s.accept("inv_10", CALLER, V100, "k10", api_key_id=OTHER_KEY)  # another key: no limit
    s.fail("inv_9")  # 7 back: 10 of 17
    s.tick(60)
    s.accept("inv_11", CALLER, V100, "k11", api_key_id=AGENT)  # 14 of 17
    s.settle("inv_8")
    s.settle("inv_10")
    s.settle("inv_11")
    s.refund("inv_11")  # a refund gives the caller the points, not the key its use
    with db.read() as session:
        assert ledger.verify(session).balanced
    return s.outcomes, _snapshot(db)


def _snapshot(db: Database) -> dict[str, Any]:
    """Everything the sequence wrote, without the ids each store made up itself."""
    with db.read() as session:
        accounts = {
            row.id: (row.owner, row.kind, row.balance)
            for row in session.execute(select(LedgerAccount.__table__))
        }
        reservations = {
            row.id: row._asdict() for row in session.execute(select(Reservation.__table__))
        }
        reference = {rid: r["reference"] for rid, r in reservations.items()}
        entries: dict[str, list[tuple[Any, ...]]] = {}
        for row in session.execute(select(LedgerEntry.__table__)):
            entries.setdefault(row.transfer_id, []).append(
                (*accounts[row.ledger_account_id][:2], row.amount)
            )
        transfers = sorted(
            (
                row.created_at,
                row.kind,
                reference.get(row.reference, row.reference),
                row.memo,
                tuple(sorted(entries.pop(row.id))),
            )
            for row in session.execute(select(LedgerTransfer.__table__))
        )
        assert not entries  # every entry belongs to a transfer
        invocation_rows = {}
        for row in session.execute(select(Invocation.__table__)):
            values = row._asdict()
            values["reservation_id"] = reference[values["reservation_id"]]
            invocation_rows[values.pop("id")] = values
        attempts = sorted(
            tuple(row) for row in session.execute(select(InvocationAttempt.__table__))
        )
        windows = sorted(tuple(row) for row in session.execute(select(QuotaWindow.__table__)))
        keys = sorted(tuple(row) for row in session.execute(select(ApiKey.__table__)))
    return {
        "balances": sorted(accounts.values()),
        "transfers": transfers,
        "reservations": {r.pop("reference"): r | {"id": None} for r in reservations.values()},
        "invocations": invocation_rows,
        "attempts": attempts,
        "quota_windows": windows,
        "api_keys": keys,
    }


EXPECTED = [
    ("grant acc_caller 100", "ok"),
    ("grant acc_poor 5", "ok"),
    ("accept inv_1", "ok"),
    ("accept inv_2", "ok"),
    ("accept inv_twin", "none"),  # a used key stops accept quietly, nothing written
    ("accept inv_3", "INSUFFICIENT_POINTS"),
    ("settle inv_1", "ok"),
    ("settle inv_1", "none"),
    ("fail inv_2", "ok"),
    ("accept inv_4", "ok"),
    ("accept inv_5", "RATE_LIMIT_EXCEEDED"),
    ("settle inv_4", "none"),
    ("settle inv_4", "ok"),
    ("accept inv_6", "ok"),
    ("resolve inv_6 SUCCEEDED", "ok"),
    ("resolve inv_6 FAILED", "INVOCATION_ALREADY_RESOLVED"),
    ("refund inv_1", "ok"),
    ("refund inv_1", "RESERVATION_ALREADY_REFUNDED"),
    ("payout 20", "INSUFFICIENT_POINTS"),
    ("payout 4", "ok"),
    ("refund inv_6", "REFUND_BLOCKED"),
    ("grant acc_poor 20", "ok"),
    ("accept inv_7", "ok"),
    ("resolve inv_7 FAILED", "ok"),
    ("refund inv_2", "RESERVATION_NOT_SETTLED"),
    ("ledger settle inv_2", "RESERVATION_ALREADY_RESOLVED"),
    ("accept inv_8", "ok"),
    ("limit key_agent 17 DAY", "ok"),
    ("accept inv_9", "ok"),
    ("accept inv_10", "KEY_SPEND_LIMIT_REACHED"),
    ("accept inv_10", "ok"),
    ("fail inv_9", "ok"),
    ("accept inv_11", "ok"),
    ("settle inv_8", "ok"),
    ("settle inv_10", "ok"),
    ("settle inv_11", "ok"),
    ("refund inv_11", "ok"),
]


def test_the_same_script_leaves_the_same_books_on_both_stores(
    tmp_path: Path, sqlite_template: Path, postgres_template: Any
) -> None:
    if postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    path = tmp_path / "agree.db"
    shutil.copyfile(sqlite_template, path)
    on_sqlite = Database(make_engine(f"sqlite:///{path}"))
    pg_engine = make_engine(postgres_template.url)
    postgres_template.truncate(pg_engine)
    on_postgres = Database(pg_engine)
    try:
        sqlite_outcomes, sqlite_books = _run(on_sqlite)
        pg_outcomes, pg_books = _run(on_postgres)
    finally:
        on_sqlite.dispose()
        on_postgres.dispose()

    assert sqlite_outcomes == EXPECTED
    assert pg_outcomes == EXPECTED
    for part in sqlite_books:
        assert sqlite_books[part] == pg_books[part], part
    # What the script must have left, read from either store: the caller paid 10 (refunded),
    # 9 and 4; the poor caller's 10 went back; the provider earned 7 + 0 + 4, 7 refunded, 4
    # paid out; the platform kept 3 (refunded) + 9.
    # Then the agent's key paid 10 and 4 (inv_9 released; inv_11 refunded), the other key 4:
    # the provider earned 7 + 4 + 4 (4 refunded), the platform 3.
    balances = {(owner, kind): balance for owner, kind, balance in sqlite_books["balances"]}
    assert balances[(CALLER, "available")] == 100 - 9 - 4 - 10 - 4
    assert balances[(CALLER, "reserved")] == 0
    assert balances[(POOR, "available")] == 25
    assert balances[(PROVIDER, "earnings")] == 11
    assert balances[("platform", "revenue")] == 12
    assert balances[("platform", "issuance")] == -125 + 4
    states = {i: (v["state"], v["settlement"]) for i, v in sqlite_books["invocations"].items()}
    assert states == {
        "inv_1": ("SUCCEEDED", "REFUNDED"),
        "inv_2": ("FAILED", "RELEASED"),
        "inv_4": ("SUCCEEDED", "SETTLED"),
        "inv_6": ("SUCCEEDED", "SETTLED"),
        "inv_7": ("FAILED", "RELEASED"),
        "inv_8": ("SUCCEEDED", "SETTLED"),
        "inv_9": ("FAILED", "RELEASED"),
        "inv_10": ("SUCCEEDED", "SETTLED"),
        "inv_11": ("SUCCEEDED", "REFUNDED"),
    }
    keys = {row[0]: row for row in sqlite_books["api_keys"]}
    assert keys[AGENT][-2:] == (START.replace(hour=0, minute=0), 14)  # period start, use
    assert keys[OTHER_KEY][-2:] == (None, 0)
