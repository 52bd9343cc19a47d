"""Concurrent submissions and decisions: one case, one refund, a balanced ledger."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import func, select

from builders.cases import CaseWorld
from mercato.cases import flows
from mercato.cases.models import Case
from mercato.cases.schemas import Decision
from mercato.core.errors import MercatoError
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerTransfer
from mercato.worker import refunds

T = TypeVar("T")
THREADS = 8


def _together(work: Callable[[], T], n: int = THREADS) -> list[T | MercatoError]:
    """Run `work` in n threads released at once by a barrier; collect results or errors."""
    barrier = threading.Barrier(n)
    results: list[T | MercatoError] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            outcome: T | MercatoError = work()
        except MercatoError as error:
            outcome = error
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == n
    return results


def _count(cw: CaseWorld, query: object) -> int:
    with cw.world.runtime.db.read() as session:
        return int(session.scalar(query) or 0)


def test_same_dispute_twice_at_once_with_one_key_is_one_case_and_one_refund(
    cw: CaseWorld,
) -> None:
    runtime = cw.world.runtime
    call = cw.session_call()

    submitted = _together(
        lambda: flows.submit_dispute(
            runtime,
            account_id=cw.person_id,
            idempotency_key="retry-me",
            invocation_id=call,
            reason="Charged for an empty result.",
        )
    )

    assert not [r for r in submitted if isinstance(r, MercatoError)]
    cases = {r.case.case_id for r in submitted if not isinstance(r, MercatoError)}
    assert len(cases) == 1
    assert sum(1 for r in submitted if not isinstance(r, MercatoError) and r.created) == 1
    assert _count(cw, select(func.count()).select_from(Case)) == 1
    (case_id,) = cases

    decided = _together(
        lambda: flows.decide(
            runtime,
            case_id=case_id,
            decision=Decision.APPROVE,
            reason="Refund owed.",
            decided_by="staff",
        ),
        n=4,
    )
    errors = [r for r in decided if isinstance(r, MercatoError)]
    assert [e.code for e in errors] == ["INVALID_CASE_TRANSITION"] * 3
    refunds.run_once(runtime)  # a worker racing nothing left: no second refund
    refund_count = select(func.count()).where(LedgerTransfer.kind == "refund")
    assert _count(cw, refund_count) == 1
    assert cw.receipt(call)["settlement"] == "REFUNDED"
    assert cw.person_available() == 100
    assert cw.world.ledger_balanced()


def test_different_keys_at_once_open_one_dispute(cw: CaseWorld) -> None:
    runtime = cw.world.runtime
    call = cw.session_call()
    counter = iter(range(THREADS))
    lock = threading.Lock()

    def submit() -> object:
        with lock:
            key = f"key-{next(counter)}"
        return flows.submit_dispute(
            runtime, account_id=cw.person_id, idempotency_key=key, invocation_id=call, reason="r"
        )

    results = _together(submit)
    codes = sorted(r.code for r in results if isinstance(r, MercatoError))
    assert codes == ["DISPUTE_ALREADY_OPEN"] * (THREADS - 1)
    assert _count(cw, select(func.count()).select_from(Case)) == 1


def test_workers_racing_one_unblocked_refund_post_it_once(cw: CaseWorld) -> None:
    runtime = cw.world.runtime
    calls = [cw.session_call() for _ in range(3)]
    case_ids = [cw.dispute(call, key=f"d-{i}").json()["caseId"] for i, call in enumerate(calls)]
    with runtime.db.transaction() as session:  # block every refund
        ledger.payout(session, account_id=cw.world.provider_id, amount=21, now=runtime.clock.now())
    for case_id in case_ids:
        assert cw.decide(case_id, "approve").json()["state"] == "APPROVED"
    # Unblock: three automated calls earn the provider 3 x 7 points again.
    assert cw.world.invoke({"n": 1}, key="e1").status_code == 200
    assert cw.world.invoke({"n": 2}, key="e2").status_code == 200
    assert cw.world.invoke({"n": 3}, key="e3").status_code == 200
    cw.world.clock.advance(60)

    _together(lambda: refunds.run_once(runtime), n=4)

    refund_count = select(func.count()).where(LedgerTransfer.kind == "refund")
    assert _count(cw, refund_count) == 3
    assert [cw.case(c).json()["state"] for c in case_ids] == ["REFUNDED"] * 3
    assert cw.world.ledger_balanced()
