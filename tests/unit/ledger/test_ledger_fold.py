"""Settled calls' credits are appended and folded later (decision 0595): every read is exact
before, during and after a fold; the fold moves nothing but where the points are counted; the
schema, not only the code, makes a reservation resolve once; settles racing folds lose nothing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import exc, text

from builders.ledger import book, ledger_account, verified
from mercato.core.clock import utcnow
from mercato.db.uow import Database
from mercato.ledger import service
from mercato.ledger.errors import RefundBlocked
from mercato.ledger.schemas import PLATFORM, AccountKind

WAIT = 60  # seconds; a bound on waiting for peers, never a stand-in for synchronisation


def _call(db: Database, caller: str, provider: str, amount: int, bps: int = 7000) -> str:
    with db.transaction() as session:
        held = service.reserve(
            session,
            account_id=caller,
            amount=amount,
            reference=f"inv_{uuid.uuid4().hex}",
            now=utcnow(),
        )
        service.settle(
            session,
            reservation_id=held,
            provider_account_id=provider,
            provider_share_bps=bps,
            now=utcnow(),
        )
    return held


def _folded(db: Database) -> int:
    with db.transaction() as session:
        return service.fold(session)


def _cached(db: Database, owner: str, kind: AccountKind) -> int | None:
    with db.read() as session:
        value = session.execute(
            text("SELECT balance FROM ledger_accounts WHERE owner = :o AND kind = :k"),
            {"o": owner, "k": kind.value},
        ).scalar()
    return None if value is None else int(value)


def _world(db: Database) -> tuple[str, str]:
    caller, provider = ledger_account(db, "caller"), ledger_account(db, "provider")
    with db.transaction() as session:
        service.grant(session, account_id=caller, amount=1000, now=utcnow())
    return caller, provider


def test_a_settle_writes_no_earnings_or_revenue_row_and_reads_stay_exact(db: Database) -> None:
    caller, provider = _world(db)
    _call(db, caller, provider, 10)
    _call(db, caller, provider, 20)
    # Nothing folded yet: no earnings row, no revenue row, yet every read is exact.
    assert _cached(db, provider, AccountKind.EARNINGS) is None
    assert _cached(db, PLATFORM, AccountKind.REVENUE) is None
    before = book(db, caller, provider)
    assert (before.earnings[provider], before.revenue) == (7 + 14, 3 + 6)
    assert (before.available[caller], before.reserved[caller]) == (970, 0)
    assert verified(db).balanced

    assert _folded(db) == 2
    assert _cached(db, provider, AccountKind.EARNINGS) == 21
    assert _cached(db, PLATFORM, AccountKind.REVENUE) == 9
    assert book(db, caller, provider) == before
    assert _folded(db) == 0  # nothing left: a second fold changes nothing
    assert book(db, caller, provider) == before

    _call(db, caller, provider, 10)  # half folded, half not
    after = book(db, caller, provider)
    assert (after.earnings[provider], after.revenue) == (28, 12)
    report = verified(db)
    assert report.balanced, report.problems
    assert (report.earnings, report.revenue, report.issued) == (28, 12, 1000)


def test_reserved_is_the_sum_of_the_held_reservations(db: Database) -> None:
    caller, _provider = _world(db)
    with db.transaction() as session:
        for amount in (5, 6):
            service.reserve(
                session, account_id=caller, amount=amount, reference=f"inv_{amount}", now=utcnow()
            )
    assert book(db, caller).reserved[caller] == 11
    assert _cached(db, caller, AccountKind.RESERVED) is None  # no row: the reservations say it
    assert verified(db).reserved == 11


def test_a_refund_and_a_payout_see_the_credits_not_folded_yet(db: Database) -> None:
    caller, provider = _world(db)
    settled = _call(db, caller, provider, 10)
    with db.transaction() as session:
        service.refund(session, reservation_id=settled, now=utcnow())
    second = _call(db, caller, provider, 10)
    with db.transaction() as session:
        service.payout(session, account_id=provider, amount=7, now=utcnow())
    with pytest.raises(RefundBlocked), db.transaction() as session:
        service.refund(session, reservation_id=second, now=utcnow())
    after = book(db, caller, provider)
    assert (after.available[caller], after.earnings[provider], after.revenue) == (990, 0, 3)
    assert verified(db).balanced


@pytest.mark.parametrize(
    ("first", "second"),
    [("SETTLED", "RELEASED"), ("RELEASED", "SETTLED"), ("SETTLED", "HELD"), ("RELEASED", "HELD")],
)
def test_the_schema_refuses_a_second_resolution(db: Database, first: str, second: str) -> None:
    caller, provider = _world(db)
    with db.transaction() as session:
        held = service.reserve(
            session, account_id=caller, amount=10, reference="inv_once", now=utcnow()
        )
        if first == "SETTLED":
            service.settle(
                session,
                reservation_id=held,
                provider_account_id=provider,
                provider_share_bps=5000,
                now=utcnow(),
            )
        else:
            service.release(session, reservation_id=held, now=utcnow())
    with pytest.raises(exc.DBAPIError), db.transaction() as session:
        session.execute(
            text("UPDATE reservations SET state = :s WHERE id = :i"), {"s": second, "i": held}
        )
    with pytest.raises(exc.DBAPIError), db.transaction() as session:  # nor a changed split
        session.execute(
            text("UPDATE reservations SET amount = amount + 1 WHERE id = :i"), {"i": held}
        )
    assert verified(db).balanced


def test_a_settled_split_or_credit_number_cannot_be_rewritten(db: Database) -> None:
    caller, provider = _world(db)
    settled = _call(db, caller, provider, 10)
    for change in (
        "provider_amount = provider_amount + 1, platform_amount = platform_amount - 1",
        "credit_seq = credit_seq + 1000",
    ):
        with pytest.raises(exc.DBAPIError), db.transaction() as session:
            session.execute(
                text(f"UPDATE reservations SET {change} WHERE id = :i"),
                {"i": settled},
            )
    with db.transaction() as session:  # a refund is the one change a settled call may take
        service.refund(session, reservation_id=settled, now=utcnow())
    assert verified(db).balanced


@pytest.mark.postgres_only
def test_settles_racing_folds_lose_no_credit(db: Database) -> None:
    """Eight threads settle 5 calls each while another folds again and again: every credit is
    counted once (folded or not), and reads stay exact throughout."""
    caller, provider = _world(db)
    barrier = threading.Barrier(9)
    stop = threading.Event()

    def settle_five(_: int) -> None:
        barrier.wait(WAIT)
        for _ in range(5):
            _call(db, caller, provider, 10)

    def fold_until_stopped() -> int:
        barrier.wait(WAIT)
        passes = 0
        while not stop.is_set() and passes < 10_000:
            _folded(db)
            passes += 1
        return passes

    with ThreadPoolExecutor(max_workers=9) as pool:
        folding = pool.submit(fold_until_stopped)
        list(pool.map(settle_five, range(8)))
        stop.set()
        assert folding.result() > 0
    report = verified(db)
    assert report.balanced, report.problems
    assert (report.earnings, report.revenue) == (8 * 5 * 7, 8 * 5 * 3)
    _folded(db)
    assert _cached(db, provider, AccountKind.EARNINGS) == 280
    assert _cached(db, PLATFORM, AccountKind.REVENUE) == 120
    assert verified(db).balanced


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


_ROWS = 60_000
_SEQ_SQL = f"(g * 7919) % {_ROWS} + 1"
"""Credit numbers in another order than the rows (as a store converted by migration 0022 has
them): a permutation of 1.._ROWS, 7919 being a prime that does not divide it."""


@pytest.mark.postgres_only
def test_an_exact_read_on_a_large_store_reads_the_credits_off_their_index(db: Database) -> None:
    """The credits not folded yet are a range of the credit numbers' index: PostgreSQL cannot
    know the fold's cursor when it plans, and `credit_seq > cursor` alone made every balance
    read scan the whole reservations table (170 ms at 1,000,000 calls)."""
    with db.transaction() as session:
        session.execute(text("SET LOCAL session_replication_role = replica"))  # no FK checks
        session.execute(
            text(
                "INSERT INTO reservations (id, account_id, reference, amount, state, "
                "provider_account_id, provider_amount, platform_amount, created_at, "
                "resolved_at, credit_seq) SELECT 'res_' || g, 'acc_c' || (g % 500), "
                "'inv_' || g, 10, 'SETTLED', 'acc_p' || (g % 40), 7, 3, now(), now(), "
                f"{_SEQ_SQL} FROM generate_series(1, {_ROWS}) g"
            )
        )
        session.execute(
            text(
                "INSERT INTO ledger_accounts (id, owner, kind, balance, folded_through) "
                "VALUES ('lac_rev', :platform, 'revenue', 0, :through)"
            ),
            {"platform": PLATFORM, "through": _ROWS - 10},
        )
    with db.engine.connect() as conn:
        conn.execute(text("ANALYZE reservations"))
        conn.execute(text("ANALYZE ledger_accounts"))
        compiled = service._BALANCES.compile(dialect=conn.dialect)  # the read under test
        params = {**compiled.params, "owner": "acc_p1"}
        explained = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", params).scalar()
    scans = list(_nodes(explained[0]["Plan"]))
    on_reservations = [n for n in scans if n.get("Relation Name") == "reservations"]
    assert all("Seq Scan" not in n["Node Type"] for n in on_reservations), on_reservations
    # The credits not folded: a narrow range of the index (ten here), not a third of it.
    ranged = [
        n
        for n in scans
        if n.get("Index Name") == "ux_reservations_credit_seq"
        and "Index Cond" in n
        and ">" in n["Index Cond"]
    ]
    assert ranged and all(n["Plan Rows"] <= _ROWS // 100 for n in ranged), ranged
    with db.read() as session:
        earned = service.balances(session, account_id="acc_p1").earnings
    numbers = {g: (g * 7919) % _ROWS + 1 for g in range(1, _ROWS + 1)}
    assert earned == 7 * sum(1 for g, n in numbers.items() if n > _ROWS - 10 and g % 40 == 1)
