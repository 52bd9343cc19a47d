"""Concurrent writers: no balance goes negative and a reservation resolves once.

Threads and processes start together at a barrier; each works in its own transaction.
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from builders.ledger import book, ledger_account, verified
from mercato.core.clock import utcnow
from mercato.core.errors import MercatoError
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.ledger import service
from mercato.ledger.errors import InsufficientPoints, ReservationAlreadyResolved
from mercato.ledger.schemas import ReservationState

WAIT = 60  # seconds; a bound on waiting for peers, never a stand-in for synchronisation


def _funded(db: Database, points: int) -> str:
    caller = ledger_account(db, "caller")
    with db.transaction() as session:
        service.grant(session, account_id=caller, amount=points, now=utcnow())
    return caller


def _reserve_once(db: Database, caller: str, barrier: threading.Barrier) -> str:
    barrier.wait(WAIT)
    try:
        with db.transaction() as session:
            service.reserve(
                session,
                account_id=caller,
                amount=10,
                reference=f"inv_{uuid.uuid4().hex}",
                now=utcnow(),
            )
    except InsufficientPoints as exc:
        return exc.code
    return "OK"


@pytest.mark.postgres_only
def test_twenty_parallel_reservations_against_a_balance_of_one_hundred(db: Database) -> None:
    caller = _funded(db, 100)
    barrier = threading.Barrier(20)
    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(lambda _: _reserve_once(db, caller, barrier), range(20)))

    assert outcomes.count("OK") == 10
    assert outcomes.count("INSUFFICIENT_POINTS") == 10
    after = book(db, caller)
    assert (after.available[caller], after.reserved[caller]) == (0, 100)
    report = verified(db)
    assert report.balanced, report.problems


def _reserve_in_process(url: str, caller: str, barrier: object, results: object) -> None:
    db = Database(make_engine(url))
    outcomes = []
    barrier.wait(WAIT)  # type: ignore[attr-defined]
    for _ in range(5):
        try:
            with db.transaction() as session:
                service.reserve(
                    session,
                    account_id=caller,
                    amount=10,
                    reference=f"inv_{uuid.uuid4().hex}",
                    now=utcnow(),
                )
            outcomes.append("OK")
        except InsufficientPoints as exc:
            outcomes.append(exc.code)
    db.dispose()
    results.put(outcomes)  # type: ignore[attr-defined]


@pytest.mark.postgres_only
def test_reservations_from_four_processes_never_overdraw(db: Database, db_url: str) -> None:
    caller = _funded(db, 100)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    workers = [
        ctx.Process(target=_reserve_in_process, args=(db_url, caller, barrier, results))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    outcomes = [o for _ in workers for o in results.get(timeout=WAIT)]
    for worker in workers:
        worker.join(WAIT)
        assert worker.exitcode == 0

    assert len(outcomes) == 20
    assert outcomes.count("OK") == 10
    assert outcomes.count("INSUFFICIENT_POINTS") == 10
    assert book(db, caller).available[caller] == 0
    report = verified(db)
    assert report.balanced, report.problems


def _race(db: Database, *attempts: Callable[[], None]) -> list[str]:
    barrier = threading.Barrier(len(attempts))

    def run(attempt: Callable[[], None]) -> str:
        barrier.wait(WAIT)
        try:
            attempt()
        except MercatoError as exc:
            return exc.code
        return "OK"

    with ThreadPoolExecutor(max_workers=len(attempts)) as pool:
        return list(pool.map(run, attempts))


def test_settle_and_release_racing_on_one_reservation_one_wins(db: Database) -> None:
    caller, provider = _funded(db, 100), ledger_account(db, "provider")
    winners: dict[str, int] = {"settle": 0, "release": 0}
    for round_ in range(8):
        with db.transaction() as session:
            held = service.reserve(
                session, account_id=caller, amount=10, reference=f"inv_{round_}", now=utcnow()
            )

        def settle(held: str = held) -> None:
            with db.transaction() as session:
                service.settle(
                    session,
                    reservation_id=held,
                    provider_account_id=provider,
                    provider_share_bps=8000,
                    now=utcnow(),
                )

        def release(held: str = held) -> None:
            with db.transaction() as session:
                service.release(session, reservation_id=held, now=utcnow())

        outcome = _race(db, settle, release)
        assert sorted(outcome) == ["OK", ReservationAlreadyResolved.code]
        winners["settle" if outcome[0] == "OK" else "release"] += 1
        with db.read() as session:
            state = service.get_reservation(session, reservation_id=held).state
        assert state is (
            ReservationState.SETTLED if outcome[0] == "OK" else ReservationState.RELEASED
        )

    after = book(db, caller, provider)
    settled = winners["settle"]
    assert after.available[caller] == 100 - 10 * settled
    assert after.reserved[caller] == 0
    assert after.earnings[provider] == 8 * settled
    assert after.revenue == 2 * settled
    report = verified(db)
    assert report.balanced, report.problems


def test_two_settles_racing_charge_once(db: Database) -> None:
    caller, provider = _funded(db, 100), ledger_account(db, "provider")
    with db.transaction() as session:
        held = service.reserve(
            session, account_id=caller, amount=10, reference="inv_1", now=utcnow()
        )

    def settle() -> None:
        with db.transaction() as session:
            service.settle(
                session,
                reservation_id=held,
                provider_account_id=provider,
                provider_share_bps=5000,
                now=utcnow(),
            )

    assert sorted(_race(db, settle, settle, settle)) == [
        "OK",
        ReservationAlreadyResolved.code,
        ReservationAlreadyResolved.code,
    ]
    assert book(db, caller, provider).earnings[provider] == 5
    assert verified(db).balanced
