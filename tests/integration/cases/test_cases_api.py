"""The case endpoints: who may submit what, idempotency, visibility, decisions."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from builders.accounts import bearer
from builders.cases import STAFF, CaseWorld
from builders.invocation_world import SERVICE
from builders.invocations import defined
from mercato.accounts.models import Account
from mercato.cases import flows
from mercato.cases import service as cases
from mercato.cases.errors import InvalidCaseTransition
from mercato.cases.schemas import Decision
from mercato.invocations.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from mercato.ledger import service as ledger


def test_api_keys_are_refused_on_every_case_endpoint(cw: CaseWorld) -> None:
    key = bearer(cw.world.api_key)
    call = cw.session_call()
    attempts = [
        cw.client.post(
            "/v1/disputes",
            json={"invocationId": call, "reason": "x"},
            headers={**key, "Idempotency-Key": "k"},
        ),
        cw.client.post(
            "/v1/content-reports",
            json={"serviceCode": "acme.echo", "version": "v1", "category": "OTHER", "text": "x"},
            headers={**key, "Idempotency-Key": "k"},
        ),
        cw.client.get("/v1/cases", headers=key),
    ]
    assert [(r.status_code, r.json()["code"]) for r in attempts] == [(403, "SESSION_REQUIRED")] * 3
    assert cw.client.get("/v1/cases").status_code == 401


def test_api_key_calls_are_not_disputable(cw: CaseWorld) -> None:
    automated = cw.world.invoke()  # the same person's automation would look the same
    assert automated.status_code == 200
    # The world's API key belongs to another caller: dispute it as its owner through a session.
    from builders.accounts import make_api_key

    own_key, _ = make_api_key(cw.world.runtime.db, cw.person_id)
    own = cw.world.invoke(key="own-automation", api_key=own_key)
    assert own.status_code == 200
    refused = cw.dispute(own.json()["invocationId"])
    assert refused.status_code == 409
    assert refused.json()["code"] == "DISPUTE_NOT_ELIGIBLE"
    assert "API key" in refused.json()["message"]


def test_only_the_caller_can_dispute_its_call(cw: CaseWorld) -> None:
    call = cw.session_call()
    refused = cw.dispute(call, token=cw.other_token)
    assert refused.status_code == 404
    assert refused.json()["code"] == "INVOCATION_NOT_FOUND"


def test_released_and_refunded_calls_are_not_disputable(cw: CaseWorld) -> None:
    cw.world.provider.script(defined(400, "BAD_INPUT"))
    released = cw.session_call()
    assert cw.receipt(released)["settlement"] == "RELEASED"
    refused = cw.dispute(released, key="d-released")
    assert (refused.status_code, refused.json()["code"]) == (409, "DISPUTE_NOT_ELIGIBLE")

    call = cw.session_call()
    case_id = cw.dispute(call, key="d-1").json()["caseId"]
    assert cw.decide(case_id, "approve").json()["state"] == "REFUNDED"
    again = cw.dispute(call, key="d-2")
    assert (again.status_code, again.json()["code"]) == (409, "DISPUTE_NOT_ELIGIBLE")
    assert "REFUNDED" in again.json()["message"]


def test_one_open_dispute_per_call_until_it_is_denied(cw: CaseWorld) -> None:
    call = cw.session_call()
    first = cw.dispute(call, key="d-1").json()["caseId"]
    second = cw.dispute(call, key="d-2", reason="Another reason.")
    assert second.status_code == 409
    assert second.json()["code"] == "DISPUTE_ALREADY_OPEN"
    assert second.json()["caseId"] == first
    assert cw.decide(first, "deny", "The result matched the contract.").json()["state"] == "DENIED"
    reopened = cw.dispute(call, key="d-3", reason="New evidence.")
    assert reopened.status_code == 201
    assert reopened.json()["caseId"] != first


def test_idempotency_key_rules(cw: CaseWorld) -> None:
    call = cw.session_call()
    missing = cw.dispute(call, key=None)
    assert (missing.status_code, missing.json()["code"]) == (400, "IDEMPOTENCY_KEY_MISSING")
    for bad in ("k" * 192, "has space", "a\x7fb"):
        invalid = cw.client.post(
            "/v1/disputes",
            json={"invocationId": call, "reason": "r"},
            headers={**bearer(cw.person_token), "Idempotency-Key": bad},
        )
        assert (invalid.status_code, invalid.json()["code"]) == (400, "IDEMPOTENCY_KEY_INVALID")

    first = cw.dispute(call, key="k" * 191)
    assert first.status_code == 201
    replay = cw.dispute(call, key="k" * 191)
    assert replay.status_code == 200
    assert replay.json() == first.json()
    other_body = cw.dispute(call, key="k" * 191, reason="Something else.")
    assert (other_body.status_code, other_body.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    as_report = cw.report(key="k" * 191)
    assert (as_report.status_code, as_report.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    # Keys are per account: another person's same key is a different submission.
    theirs = cw.report(key="k" * 191, token=cw.other_token)
    assert theirs.status_code == 201


@pytest.mark.parametrize(
    ("key", "refusal"),
    [
        ("", IdempotencyKeyMissing),
        ("k" * 192, IdempotencyKeyInvalid),
        ("k" * 300, IdempotencyKeyInvalid),
        ("has space", IdempotencyKeyInvalid),
        ("clé", IdempotencyKeyInvalid),
    ],
)
def test_every_case_submission_passes_the_key_rule_in_the_flow(
    cw: CaseWorld, key: str, refusal: type[Exception]
) -> None:
    """The rule is the flow's, not only the API handler's: no caller can store a bad key."""
    call = cw.session_call()
    runtime = cw.world.runtime
    with pytest.raises(refusal):
        flows.submit_dispute(
            runtime, account_id=cw.person_id, idempotency_key=key, invocation_id=call, reason="r"
        )
    with pytest.raises(refusal):
        flows.submit_report(
            runtime,
            account_id=cw.person_id,
            idempotency_key=key,
            service_code=SERVICE,
            version="v1",
            category="MISLEADING",
            text="t",
        )
    with runtime.db.read() as session:
        assert cases.list_cases(session, account_id=cw.person_id, limit=10).items == []


def test_replay_returns_the_case_in_its_current_state(cw: CaseWorld) -> None:
    call = cw.session_call()
    case_id = cw.dispute(call).json()["caseId"]
    cw.decide(case_id, "approve")
    replay = cw.dispute(call)  # a network retry after the refund: still the same case
    assert replay.status_code == 200
    assert (replay.json()["caseId"], replay.json()["state"]) == (case_id, "REFUNDED")


def test_report_replay_survives_the_listing_being_held(cw: CaseWorld) -> None:
    first = cw.report()
    cw.decide(first.json()["caseId"], "uphold")
    assert cw.report().json()["caseId"] == first.json()["caseId"]


@pytest.mark.parametrize(
    "body",
    [
        {"invocationId": "inv_x", "reason": "r", "extra": 1},
        {"invocationId": "inv_x"},
        {"invocationId": 5, "reason": "r"},
    ],
)
def test_malformed_dispute_bodies_are_400(cw: CaseWorld, body: dict[str, object]) -> None:
    response = cw.client.post(
        "/v1/disputes", json=body, headers={**bearer(cw.person_token), "Idempotency-Key": "k"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")


def test_blank_or_huge_texts_and_unknown_categories_are_400(cw: CaseWorld) -> None:
    call = cw.session_call()
    assert cw.dispute(call, key="a", reason="   ").json()["code"] == "INVALID_CASE_INPUT"
    assert cw.dispute(call, key="b", reason="x" * 2001).status_code == 400
    unknown = cw.report(key="c", category="SPAM")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "INVALID_CASE_INPUT")


def test_reports_name_an_exact_public_publication(cw: CaseWorld) -> None:
    for version in ("v2", "latest", "1"):
        missing = cw.report(key=f"r-{version}", version=version)
        assert (missing.status_code, missing.json()["code"]) == (404, "VERSION_NOT_FOUND")
    nothing = cw.report(key="r-none", service="acme.none")
    assert (nothing.status_code, nothing.json()["code"]) == (404, "LISTING_NOT_FOUND")
    made = cw.report(key="r-ok", category="INFRINGEMENT", text="Copies my service.")
    assert made.status_code == 201
    assert {k: made.json()[k] for k in ("kind", "state", "serviceCode", "version")} == {
        "kind": "CONTENT_REPORT",
        "state": "OPEN",
        "serviceCode": "acme.echo",
        "version": "v1",
    }


def test_cases_are_visible_to_their_submitter_and_to_staff_only(cw: CaseWorld) -> None:
    mine = cw.dispute(cw.session_call(), key="m1").json()["caseId"]
    report = cw.report(key="m2").json()["caseId"]
    theirs = cw.report(key="t1", token=cw.other_token).json()["caseId"]

    assert cw.case(theirs).status_code == 404
    assert cw.case(theirs).json()["code"] == "CASE_NOT_FOUND"
    assert cw.case("case_nope").status_code == 404
    assert cw.case(mine).json()["caseId"] == mine
    staff_view = cw.case(theirs, token=cw.staff_token).json()
    assert staff_view["submittedBy"] is not None
    assert "submittedBy" not in cw.case(mine).json()

    own = cw.client.get("/v1/cases", headers=bearer(cw.person_token)).json()
    assert [c["caseId"] for c in own["items"]] == [report, mine]  # newest first
    assert own["nextCursor"] is None
    everyone = cw.client.get("/v1/cases", headers=bearer(cw.staff_token)).json()
    assert [c["caseId"] for c in everyone["items"]] == [theirs, report, mine]


def test_case_list_pages_with_a_cursor(cw: CaseWorld) -> None:
    made = [cw.report(key=f"p{i}").json()["caseId"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = cw.client.get("/v1/cases", params=params, headers=bearer(cw.person_token)).json()
        seen += [c["caseId"] for c in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))
    bad = cw.client.get("/v1/cases?cursor=!!", headers=bearer(cw.person_token))
    assert (bad.status_code, bad.json()["code"]) == (400, "INVALID_CURSOR")
    filtered = cw.client.get("/v1/cases?kind=DISPUTE", headers=bearer(cw.person_token)).json()
    assert filtered["items"] == []


def test_only_staff_decide_and_only_valid_transitions(cw: CaseWorld) -> None:
    dispute = cw.dispute(cw.session_call()).json()["caseId"]
    report = cw.report().json()["caseId"]
    as_person = cw.client.post(
        f"/v1/cases/{dispute}:decide",
        json={"decision": "approve", "reason": "mine"},
        headers=bearer(cw.person_token),
    )
    assert as_person.status_code == 403
    wrong_kind = cw.decide(dispute, "uphold")
    assert (wrong_kind.status_code, wrong_kind.json()["code"]) == (409, "INVALID_CASE_TRANSITION")
    assert cw.decide(report, "approve").json()["code"] == "INVALID_CASE_TRANSITION"
    unknown = cw.decide(report, "maybe")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "INVALID_CASE_INPUT")
    assert cw.decide(dispute, "deny", "   ").json()["code"] == "INVALID_CASE_INPUT"
    assert cw.decide(dispute, "deny", "No evidence.").json()["state"] == "DENIED"
    twice = cw.decide(dispute, "approve")
    assert (twice.status_code, twice.json()["code"]) == (409, "INVALID_CASE_TRANSITION")
    assert cw.decide(report, "dismiss").json()["state"] == "DISMISSED"
    assert cw.decide(report, "uphold").status_code == 409
    assert cw.decide("case_nope", "deny").status_code == 404
    assert cw.client.get("/v1/catalog/listings/acme.echo").status_code == 200


def test_no_one_decides_a_case_they_are_party_to(cw: CaseWorld) -> None:
    # Decision 0189: the submitter and the provider of the service are parties to a case.
    db = cw.world.runtime.db
    with db.read() as session:
        staff_id = session.scalars(select(Account.id).where(Account.email == STAFF)).one()
    with db.transaction() as session:
        ledger.grant(session, account_id=staff_id, amount=10, now=cw.world.clock.now())
    own_call = cw.session_call(cw.staff_token)
    own_dispute = cw.dispute(own_call, key="own", token=cw.staff_token).json()["caseId"]
    own_report = cw.report(key="own-report", token=cw.staff_token).json()["caseId"]
    for case_id, decision in ((own_dispute, "approve"), (own_report, "uphold")):
        refused = cw.decide(case_id, decision)
        assert (refused.status_code, refused.json()["code"]) == (409, "INVALID_CASE_TRANSITION")
        assert cw.case(case_id, cw.staff_token).json()["state"] == "OPEN"
    assert cw.receipt(own_call, cw.staff_token)["settlement"] == "SETTLED"  # no refund
    assert cw.client.get("/v1/catalog/listings/acme.echo").status_code == 200  # no hold
    # The provider of the disputed service may not decide it either, whatever its role.
    dispute = cw.dispute(cw.session_call()).json()["caseId"]
    with pytest.raises(InvalidCaseTransition), db.transaction() as session:
        cases.decide(
            session,
            case_id=dispute,
            decision=Decision.APPROVE,
            reason="Looks fine to me.",
            decided_by=cw.world.provider_id,
            now=cw.world.clock.now(),
        )
    # Anyone else with the authority decides as before.
    assert cw.decide(dispute, "approve").json()["state"] in ("APPROVED", "REFUNDED")
