"""Spec 3.3, row by row, as worked examples over real calls to a provider on 127.0.0.1.

acme.echo v1 costs 10 points; the provider's share is 70% (7 to earnings, 3 to revenue).
"""

from __future__ import annotations

from sqlalchemy import func, select

from builders.accounts import bearer
from builders.cases import CaseWorld
from builders.invocations import unknown
from mercato.cases.models import Case
from mercato.catalog import service as catalog
from mercato.catalog.models import Hold, Version
from mercato.invocations.models import Invocation
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerEntry, LedgerTransfer
from mercato.worker import refunds


def _count(cw: CaseWorld, model: type) -> int:
    with cw.world.runtime.db.read() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def _refund_transfers(cw: CaseWorld) -> int:
    with cw.world.runtime.db.read() as session:
        query = select(func.count()).where(LedgerTransfer.kind == "refund")
        return int(session.scalar(query) or 0)


def test_open_settlement_is_shown_pending_and_claims_no_zero_spend(cw: CaseWorld) -> None:
    cw.world.provider.script(unknown())
    call = cw.session_call()

    receipt = cw.receipt(call)
    assert receipt["settlement"] == "PENDING"
    assert receipt["status"] == "PENDING"
    assert receipt["actualSpend"] is None  # never 0 while pending
    assert receipt["listedPrice"] == 10
    refused = cw.dispute(call)
    assert refused.status_code == 409
    assert refused.json()["code"] == "DISPUTE_NOT_ELIGIBLE"


def test_settled_call_approved_dispute_refund_completes(cw: CaseWorld) -> None:
    call = cw.session_call()
    assert cw.person_available() == 90
    assert cw.receipt(call)["actualSpend"] == 10
    opened = cw.dispute(call)
    assert opened.status_code == 201, opened.text
    case_id = opened.json()["caseId"]
    assert opened.json()["state"] == "OPEN"

    decided = cw.decide(case_id, "approve", "Provider confirmed the empty result.")

    assert decided.status_code == 200, decided.text
    assert decided.json()["state"] == "REFUNDED"
    receipt = cw.receipt(call)
    assert receipt["settlement"] == "REFUNDED"
    assert receipt["actualSpend"] == 0
    assert receipt["listedPrice"] == 10
    assert receipt["refundedAt"] is not None
    assert receipt["settledAt"] is not None
    assert cw.person_available() == 100  # the full listed price, in points
    assert cw.world.earnings() == 0
    seen = cw.case(case_id).json()
    assert seen["state"] == "REFUNDED"
    assert seen["refund"] == {"pending": False, "refundedAt": receipt["refundedAt"]}
    assert seen["decision"]["reason"] == "Provider confirmed the empty result."
    assert "decidedBy" not in seen["decision"]  # the submitter does not see who decided
    assert cw.world.ledger_balanced()


def test_blocked_refund_keeps_approved_and_evidence_until_the_worker_posts_it(
    cw: CaseWorld,
) -> None:
    call = cw.session_call()
    runtime = cw.world.runtime
    with runtime.db.transaction() as session:  # the provider's 7 points leave the system
        ledger.payout(session, account_id=cw.world.provider_id, amount=7, now=runtime.clock.now())
    case_id = cw.dispute(call).json()["caseId"]

    decided = cw.decide(case_id, "approve", "Refund owed.")

    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert body["state"] == "APPROVED"
    assert body["decision"]["reason"] == "Refund owed."
    assert body["decision"]["decidedBy"] is not None
    assert body["refund"]["pending"] is True
    assert body["refund"]["refundedAt"] is None
    assert body["refund"]["lastError"].startswith("REFUND_BLOCKED")
    receipt = cw.receipt(call)
    assert receipt["settlement"] == "SETTLED"  # no claim that the points arrived
    assert receipt["actualSpend"] == 10
    assert receipt["refundedAt"] is None
    assert cw.person_available() == 90
    assert _refund_transfers(cw) == 0

    cw.world.clock.advance(20)  # due again, still blocked: nothing changes but the schedule
    assert refunds.run_once(runtime) == 1
    assert cw.case(case_id).json()["state"] == "APPROVED"
    assert cw.receipt(call)["settlement"] == "SETTLED"

    assert cw.world.invoke({"n": 2}, key="earn").status_code == 200  # earnings: 7 again
    assert refunds.run_once(runtime) == 0  # not due yet: backoff
    cw.world.clock.advance(120)
    assert refunds.run_once(runtime) == 1

    assert cw.case(case_id).json()["state"] == "REFUNDED"
    receipt = cw.receipt(call)
    assert receipt["settlement"] == "REFUNDED"
    assert receipt["actualSpend"] == 0
    assert receipt["listedPrice"] == 10
    assert receipt["refundedAt"] is not None
    assert cw.person_available() == 100
    cw.world.clock.advance(3600)
    assert refunds.run_once(runtime) == 0  # posted once; nothing left to retry
    assert _refund_transfers(cw) == 1
    assert cw.world.ledger_balanced()


def _history(cw: CaseWorld) -> tuple[int, int, int, int]:
    return (
        _count(cw, Invocation),
        _count(cw, LedgerTransfer),
        _count(cw, LedgerEntry),
        _count(cw, Version),
    )


def test_upheld_report_unlists_and_blocks_calls_without_deleting_history(cw: CaseWorld) -> None:
    call = cw.session_call()
    automated = cw.world.invoke()
    assert automated.status_code == 200
    before = _history(cw)
    case_id = cw.report().json()["caseId"]

    decided = cw.decide(case_id, "uphold", "Misleading description confirmed.")

    assert decided.status_code == 200, decided.text
    assert decided.json()["state"] == "UPHELD"
    assert cw.client.get("/v1/catalog/listings/acme.echo").status_code == 404
    listed = cw.client.get("/v1/catalog/listings").json()
    assert all(item["serviceCode"] != "acme.echo" for item in listed["items"])
    blocked = cw.world.invoke(key="after-hold")
    assert blocked.status_code == 403
    assert blocked.json()["code"] == "LISTING_UNAVAILABLE"
    assert _history(cw) == before  # publications, invocations and points records all kept
    assert cw.receipt(call)["settlement"] == "SETTLED"
    automated_receipt = cw.world.get("/v1/invocations/" + automated.json()["invocationId"])
    assert automated_receipt.json()["settlement"] == "SETTLED"
    with cw.world.runtime.db.read() as session:
        holds = session.execute(select(Hold.id, Hold.kind, Hold.case_id, Hold.released_at)).all()
    assert [tuple(h) for h in holds] == [(decided.json()["holdId"], "report", case_id, None)]
    assert cw.world.ledger_balanced()


def test_releasing_one_of_two_holds_keeps_the_listing_held(cw: CaseWorld) -> None:
    first = cw.report(key="r1").json()["caseId"]
    second = cw.report(key="r2", token=cw.other_token, category="MALICIOUS").json()["caseId"]
    hold_ids = [cw.decide(case, "uphold").json()["holdId"] for case in (first, second)]
    runtime = cw.world.runtime

    def release(hold_id: str) -> None:
        with runtime.db.transaction() as session:
            catalog.release_hold(
                session, hold_id=hold_id, released_by="staff", now=runtime.clock.now()
            )

    def public() -> bool:
        return cw.client.get("/v1/catalog/listings/acme.echo").status_code == 200

    release(hold_ids[0])
    assert not public()
    assert cw.world.invoke(key="still-held").json()["code"] == "LISTING_UNAVAILABLE"
    release(hold_ids[1])
    assert public()
    assert cw.world.invoke(key="restored").status_code == 200
    with runtime.db.read() as session:
        states = session.execute(select(Case.state, Case.hold_id).order_by(Case.id)).all()
    assert [s for s, _ in states] == ["UPHELD", "UPHELD"]  # the cases keep their decision


def test_report_hold_and_staff_hold_are_one_set(cw: CaseWorld) -> None:
    runtime = cw.world.runtime
    with runtime.db.transaction() as session:
        staff_hold = catalog.place_hold(
            session,
            service_code="acme.echo",
            kind="staff",
            reason="audit",
            created_by="staff",
            now=runtime.clock.now(),
        )
    # Reports are made against the *currently public* publication: held → not found.
    refused = cw.report(key="too-late")
    assert refused.status_code == 404
    assert refused.json()["code"] == "LISTING_NOT_FOUND"
    with runtime.db.transaction() as session:
        catalog.release_hold(
            session, hold_id=staff_hold, released_by="staff", now=runtime.clock.now()
        )
    case_id = cw.report(key="now").json()["caseId"]
    cw.decide(case_id, "uphold")
    with runtime.db.transaction() as session:
        catalog.place_hold(
            session,
            service_code="acme.echo",
            kind="staff",
            reason="audit again",
            created_by="staff",
            now=runtime.clock.now(),
        )
        report_hold = session.scalars(select(Hold.id).where(Hold.case_id == case_id)).one()
        catalog.release_hold(
            session, hold_id=report_hold, released_by="staff", now=runtime.clock.now()
        )
    assert cw.client.get("/v1/catalog/listings/acme.echo").status_code == 404
    probe = cw.client.post(
        "/v1/services/acme.echo/versions/v1:invoke",
        json={"n": 1},
        headers={**bearer(cw.person_token), "Idempotency-Key": "probe"},
    )
    assert probe.json()["code"] == "LISTING_UNAVAILABLE"
