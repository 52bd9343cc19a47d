"""The provider API and staff review on both stores: every lifecycle step allowed and refused
(a refused one changes nothing), pointed contract errors, and providers isolated from each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from sqlalchemy import func, select, text

from builders.accounts import bearer, login, make_account, make_api_key
from builders.catalog import example_contract, make_provider, publish
from builders.providers import CREDENTIAL, Faults, RunningProvider, reference_provider
from mercato.catalog import lifecycle
from mercato.catalog.errors import VersionStateConflict
from mercato.catalog.examples import example_contract as packaged_contract
from mercato.catalog.models import Version, VersionTransition
from mercato.conformance.flows import change_connection
from mercato.db.runtime import Runtime
from mercato.providers import service as providers

PROVIDER, OTHER, STAFF = "provider@example.com", "other@example.com", "staff@example.com"
STAFF_PROVIDER = "staff-provider@example.com"  # staff who also run a listing of their own
CONTRACT = example_contract(artifactContract=None)


@dataclass
class Api:
    client: TestClient
    runtime: Runtime
    provider: RunningProvider
    headers: dict[str, dict[str, str]]

    def call(self, who: str, method: str, path: str, body: Any = None) -> Any:
        return self.client.request(method, path, json=body, headers=self.headers[who])

    def connect(self, who: str = PROVIDER, name: str = "main") -> str:
        body = {"name": name, "baseUrl": self.provider.url, "credential": CREDENTIAL}
        made = self.call(who, "POST", "/v1/provider/connections", body)
        assert made.status_code == 201, made.text
        return str(made.json()["connectionId"])

    def draft(
        self,
        connection_id: str,
        *,
        code: str = "acme.tool",
        version: str = "v1",
        who: str = PROVIDER,
    ) -> str:
        if self.call(who, "GET", f"/v1/provider/listings/{code}/versions").status_code == 404:
            listing = {"serviceCode": code, "displayName": "Tool", "description": "A tool."}
            assert self.call(who, "POST", "/v1/provider/listings", listing).status_code == 201
        body = {"version": version, "connectionId": connection_id, "price": 7, "contract": CONTRACT}
        made = self.call(who, "POST", f"/v1/provider/listings/{code}/versions", body)
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "DRAFT"
        return str(made.json()["versionId"])

    def step(self, who: str, version_id: str, action: str, body: Any = None) -> Any:
        prefix = "/v1/provider/versions" if action == "submit" else "/v1/staff/versions"
        return self.call(who, "POST", f"{prefix}/{version_id}:{action}", body)

    def move(self, connection_id: str, base_url: str) -> None:
        """The provider points its connection at another address (the platform re-checks it)."""
        changed = change_connection(
            self.runtime,
            self.runtime.provider_client(),
            connection_id=connection_id,
            base_url=base_url,
        )
        assert changed.run is not None and changed.run.passed

    def approved(self, connection_id: str) -> bool:
        with self.runtime.db.read() as session:
            return providers.is_approved(session, connection_id=connection_id)

    def version(self, version_id: str, who: str = PROVIDER) -> dict[str, Any]:
        got = self.call(who, "GET", f"/v1/provider/versions/{version_id}")
        assert got.status_code == 200, got.text
        document: dict[str, Any] = got.json()
        return document

    def stored(self, version_id: str) -> tuple[Any, ...]:
        """The version row and how many transitions it has, read from the database."""
        with self.runtime.db.read() as session:
            row = session.get(Version, version_id)
            assert row is not None
            count = session.scalar(
                select(func.count())
                .select_from(VersionTransition)
                .where(VersionTransition.version_id == version_id)
            )
            return (row.state, row.price, row.contract_digest, row.submitted_run_id, count)


@pytest.fixture
def api(runtime: Runtime, client: TestClient) -> Iterator[Api]:
    make_account(runtime.db, PROVIDER)
    make_account(runtime.db, OTHER)
    make_account(runtime.db, STAFF, is_staff=True)
    make_account(runtime.db, STAFF_PROVIDER, is_staff=True)
    everyone = (PROVIDER, OTHER, STAFF, STAFF_PROVIDER)
    headers = {who: bearer(login(client, who)["accessToken"]) for who in everyone}
    with reference_provider() as provider:
        yield Api(client, runtime, provider, headers)


def test_draft_submit_approve_publish_through_the_api(api: Api) -> None:
    connection_id = api.connect()
    connection = api.call(PROVIDER, "GET", f"/v1/provider/connections/{connection_id}").json()
    run = connection["latestRun"]
    assert run["passed"] and [c["status"] for c in run["checks"]] == ["passed"] * 9
    assert CREDENTIAL not in str(connection)
    listed = api.call(PROVIDER, "GET", "/v1/provider/connections").json()["items"]
    assert [c["connectionId"] for c in listed] == [connection_id]

    version_id = api.draft(connection_id)
    submitted = api.step(PROVIDER, version_id, "submit")
    assert submitted.status_code == 200, submitted.text
    assert submitted.json()["state"] == "SUBMITTED"
    assert submitted.json()["submittedRunId"] == run["runId"]
    approved = api.step(STAFF, version_id, "approve")
    assert approved.status_code == 200 and approved.json()["state"] == "APPROVED"
    published = api.step(STAFF, version_id, "publish")
    assert published.status_code == 200 and published.json()["state"] == "PUBLISHED"

    steps = api.version(version_id)["transitions"]
    assert [(s["fromState"], s["toState"], s["role"]) for s in steps] == [
        (None, "DRAFT", "provider"),
        ("DRAFT", "SUBMITTED", "provider"),
        ("SUBMITTED", "APPROVED", "staff"),
        ("APPROVED", "PUBLISHED", "staff"),
    ]
    assert steps[1]["runId"] == run["runId"] and all(s["at"] and s["reason"] for s in steps)
    public = api.client.get("/v1/catalog/listings/acme.tool/versions/v1")
    assert public.status_code == 200 and public.json()["price"] == 7


def test_refused_steps_change_nothing(api: Api) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    refusals = [
        (STAFF, "approve"),
        (STAFF, "publish"),
        (STAFF, "request-changes"),
    ]
    for who, action in refusals:
        before = api.stored(version_id)
        body = {"reason": "why"} if action == "request-changes" else None
        refused = api.step(who, version_id, action, body)
        assert (refused.status_code, refused.json()["code"]) == (409, "VERSION_STATE_CONFLICT")
        assert refused.json()["state"] == "DRAFT"
        assert api.stored(version_id) == before

    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    for who, action in [(PROVIDER, "submit"), (STAFF, "publish")]:
        before = api.stored(version_id)
        refused = api.step(who, version_id, action)
        assert (refused.status_code, refused.json()["code"]) == (409, "VERSION_STATE_CONFLICT")
        assert api.stored(version_id) == before

    assert api.step(STAFF, version_id, "approve").status_code == 200
    assert api.step(STAFF, version_id, "publish").status_code == 200
    for who, action in [(PROVIDER, "submit"), (STAFF, "approve"), (STAFF, "publish")]:
        before = api.stored(version_id)
        refused = api.step(who, version_id, action)
        assert (refused.status_code, refused.json()["code"]) == (409, "VERSION_STATE_CONFLICT")
        assert api.stored(version_id) == before
    before = api.stored(version_id)
    frozen = api.call(PROVIDER, "PUT", f"/v1/provider/versions/{version_id}", {"price": 9})
    assert (frozen.status_code, frozen.json()["code"]) == (409, "VERSION_IMMUTABLE")
    assert api.stored(version_id) == before


def test_review_needs_a_passing_latest_run_on_the_current_revision(api: Api) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    api.provider.state.faults = Faults(accept_wrong_credential=True)
    failed = api.call(PROVIDER, "POST", f"/v1/provider/connections/{connection_id}:check")
    assert failed.status_code == 200 and not failed.json()["latestRun"]["passed"]
    before = api.stored(version_id)
    refused = api.step(PROVIDER, version_id, "submit")
    assert (refused.status_code, refused.json()["code"]) == (409, "CONFORMANCE_NOT_PASSED")
    assert api.stored(version_id) == before

    api.provider.state.faults = Faults()
    assert api.call(PROVIDER, "POST", f"/v1/provider/connections/{connection_id}:check").json()[
        "latestRun"
    ]["passed"]
    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    # The provider breaks after submission: staff can neither approve nor publish.
    api.provider.state.faults = Faults(accept_missing_credential=True)
    api.call(PROVIDER, "POST", f"/v1/provider/connections/{connection_id}:check")
    before = api.stored(version_id)
    refused = api.step(STAFF, version_id, "approve")
    assert (refused.status_code, refused.json()["code"]) == (409, "CONFORMANCE_NOT_PASSED")
    assert api.stored(version_id) == before

    api.provider.state.faults = Faults()
    api.call(PROVIDER, "POST", f"/v1/provider/connections/{connection_id}:check")
    assert api.step(STAFF, version_id, "approve").status_code == 200
    api.provider.state.faults = Faults(unknown_key_succeeds=True)
    api.call(PROVIDER, "POST", f"/v1/provider/connections/{connection_id}:check")
    before = api.stored(version_id)
    refused = api.step(STAFF, version_id, "publish")
    assert (refused.status_code, refused.json()["code"]) == (409, "CONFORMANCE_NOT_PASSED")
    assert api.stored(version_id) == before


def test_staff_never_review_or_publish_their_own_listing(api: Api) -> None:
    connection_id = api.connect(STAFF_PROVIDER)
    version_id = api.draft(connection_id, code="staff.tool", who=STAFF_PROVIDER)
    assert api.step(STAFF_PROVIDER, version_id, "submit").status_code == 200
    for action, body in [("approve", None), ("request-changes", {"reason": "fine by me"})]:
        before = api.stored(version_id)
        refused = api.step(STAFF_PROVIDER, version_id, action, body)
        assert (refused.status_code, refused.json()["code"]) == (403, "SELF_REVIEW_FORBIDDEN")
        assert api.stored(version_id) == before
    assert not api.approved(connection_id)

    # Another staff member reviews it; its owner still cannot publish it.
    assert api.step(STAFF, version_id, "approve").status_code == 200
    before = api.stored(version_id)
    refused = api.step(STAFF_PROVIDER, version_id, "publish")
    assert (refused.status_code, refused.json()["code"]) == (403, "SELF_REVIEW_FORBIDDEN")
    assert api.stored(version_id) == before
    assert api.client.get("/v1/catalog/listings/staff.tool/versions/v1").status_code == 404
    assert api.step(STAFF, version_id, "publish").json()["state"] == "PUBLISHED"
    steps = api.version(version_id, STAFF_PROVIDER)["transitions"]
    assert [s["toState"] for s in steps] == ["DRAFT", "SUBMITTED", "APPROVED", "PUBLISHED"]


def test_approval_covers_the_revision_the_version_was_submitted_with(api: Api) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    first_run = api.step(PROVIDER, version_id, "submit").json()["submittedRunId"]
    with reference_provider() as elsewhere:
        # After submitting, the provider moves the connection and its new address passes.
        api.move(connection_id, elsewhere.url)
        before = api.stored(version_id)
        refused = api.step(STAFF, version_id, "approve")
        assert (refused.status_code, refused.json()["code"]) == (409, "VERSION_STATE_CONFLICT")
        assert refused.json()["state"] == "SUBMITTED"
        assert api.stored(version_id) == before and not api.approved(connection_id)

        # Submitted again, the version is bound to the new address's run and can be approved.
        again = api.step(PROVIDER, version_id, "submit")
        assert again.status_code == 200 and again.json()["state"] == "SUBMITTED"
        assert again.json()["submittedRunId"] not in (None, first_run)
        assert api.step(STAFF, version_id, "approve").json()["state"] == "APPROVED"
        assert api.approved(connection_id)
    steps = api.version(version_id)["transitions"]
    assert [(s["fromState"], s["toState"]) for s in steps] == [
        (None, "DRAFT"),
        ("DRAFT", "SUBMITTED"),
        ("SUBMITTED", "SUBMITTED"),
        ("SUBMITTED", "APPROVED"),
    ]


def _until_waiting_on_a_lock(runtime: Runtime, thread: threading.Thread) -> None:
    """On PostgreSQL, return once another backend waits on a row lock (the approval blocked
    behind the open change); SQLite's writers are serialised at BEGIN IMMEDIATE instead."""
    if runtime.db.engine.dialect.name != "postgresql":
        return
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    deadline = time.monotonic() + 30
    while thread.is_alive() and time.monotonic() < deadline:
        with runtime.db.read() as session:
            if session.execute(waiting).scalar_one():
                return
        time.sleep(0.01)
    raise AssertionError("the approval never waited for the connection's row lock")


def test_a_connection_changed_during_approval_is_never_approved(api: Api) -> None:
    """Staff approve while the provider's change of the connection is not yet committed: the
    approval waits for the connection's row and then refuses, never approving the old revision
    the change is replacing nor the new one the version was not submitted with."""
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    staff_id = api.call(STAFF, "GET", "/v1/me").json()["accountId"]
    outcome: list[str] = []

    def approve() -> None:
        try:
            with api.runtime.db.transaction() as session:
                lifecycle.approve(
                    session, version_id=version_id, actor_id=staff_id, now=api.runtime.clock.now()
                )
            outcome.append("approved")
        except VersionStateConflict:
            outcome.append("conflict")
        except Exception as error:  # any other end is the failure to report
            outcome.append(repr(error))

    staff = threading.Thread(target=approve)
    with api.runtime.db.transaction() as session:
        providers.update_connection(
            session,
            connection_id=connection_id,
            settings=api.runtime.settings,
            now=api.runtime.clock.now(),
            name="renamed",
        )
        staff.start()
        _until_waiting_on_a_lock(api.runtime, staff)
    staff.join(timeout=60)
    assert outcome == ["conflict"]
    assert api.stored(version_id)[0] == "SUBMITTED" and not api.approved(connection_id)


def test_an_approved_version_whose_connection_changed_is_not_published(api: Api) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    assert api.step(STAFF, version_id, "approve").status_code == 200
    with reference_provider() as elsewhere:
        api.move(connection_id, elsewhere.url)
        before = api.stored(version_id)
        refused = api.step(STAFF, version_id, "publish")
        assert (refused.status_code, refused.json()["code"]) == (409, "VERSION_STATE_CONFLICT")
        assert refused.json()["state"] == "APPROVED"
        assert api.stored(version_id) == before
        # Publication did not approve the new address behind staff's back.
        assert not api.approved(connection_id)
        assert api.client.get("/v1/catalog/listings/acme.tool/versions/v1").status_code == 404

        assert api.step(PROVIDER, version_id, "submit").json()["state"] == "SUBMITTED"
        assert api.step(STAFF, version_id, "approve").status_code == 200
        assert api.step(STAFF, version_id, "publish").json()["state"] == "PUBLISHED"
        assert api.approved(connection_id)


def test_changes_requested_edits_and_resubmission(api: Api) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    before = api.stored(version_id)
    blank = api.step(STAFF, version_id, "request-changes", {"reason": "  "})
    assert (blank.status_code, blank.json()["code"]) == (422, "INVALID_REVIEW_REASON")
    assert api.stored(version_id) == before
    asked = api.step(STAFF, version_id, "request-changes", {"reason": "Describe the limit."})
    assert asked.status_code == 200 and asked.json()["state"] == "CHANGES_REQUESTED"
    assert api.version(version_id)["reviewReason"] == "Describe the limit."

    # Resubmitting as is is allowed; an edit after submission returns the version to DRAFT.
    assert api.step(PROVIDER, version_id, "submit").json()["state"] == "SUBMITTED"
    path = f"/v1/provider/versions/{version_id}"
    same = api.call(PROVIDER, "PUT", path, {"price": 7, "contract": CONTRACT})
    assert same.status_code == 200 and same.json()["state"] == "SUBMITTED"  # nothing changed
    edited = api.call(PROVIDER, "PUT", path, {"price": 8})
    assert edited.status_code == 200 and edited.json()["state"] == "DRAFT"
    assert edited.json()["submittedRunId"] is None
    last = edited.json()["transitions"][-1]
    assert (last["fromState"], last["toState"], last["role"]) == ("SUBMITTED", "DRAFT", "provider")
    assert api.step(PROVIDER, version_id, "submit").status_code == 200
    assert api.step(STAFF, version_id, "approve").status_code == 200
    edited = api.call(PROVIDER, "PUT", path, {"contract": {**CONTRACT, "requestMaxBytes": 1000}})
    assert edited.json()["state"] == "DRAFT"
    refused = api.step(STAFF, version_id, "publish")
    assert refused.status_code == 409 and refused.json()["code"] == "VERSION_STATE_CONFLICT"


def test_contract_errors_point_at_each_bad_member_and_store_nothing(api: Api) -> None:
    connection_id = api.connect()
    api.draft(connection_id, version="v1")
    bad = {
        **CONTRACT,
        "requestSchema": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "maximum": "five hundred"}},
        },
        "resultSchema": {"type": "no-such-type"},
        "contractDigest": "0" * 64,
        "requestMaxBytes": 0,
    }
    del bad["requestShape"]
    body = {"version": "v2", "connectionId": connection_id, "price": 3, "contract": bad}
    refused = api.call(PROVIDER, "POST", "/v1/provider/listings/acme.tool/versions", body)
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "INVALID_CONTRACT"
    pointers = {e["pointer"] for e in refused.json()["errors"]}
    assert {
        "/requestSchema/properties/limit/maximum",
        "/resultSchema/type",
        "/contractDigest",
        "/requestMaxBytes",
        "/requestShape",
    } <= pointers
    listing = api.call(PROVIDER, "GET", "/v1/provider/listings/acme.tool/versions").json()
    assert [v["version"] for v in listing["versions"]] == ["v1"]

    version_id = listing["versions"][0]["versionId"]
    before = api.stored(version_id)
    other_dialect = {
        **CONTRACT,
        "resultSchema": {"$schema": "http://json-schema.org/draft-07/schema#"},
    }
    put = api.call(
        PROVIDER, "PUT", f"/v1/provider/versions/{version_id}", {"contract": other_dialect}
    )
    assert put.status_code == 422
    assert [e["pointer"] for e in put.json()["errors"]] == ["/resultSchema/$schema"]
    assert api.stored(version_id) == before


def test_the_contract_schema_is_served_and_the_examples_follow_it(api: Api) -> None:
    served = api.client.get("/v1/schemas/contract")
    assert served.status_code == 200
    schema = served.json()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    for contract in (packaged_contract(), CONTRACT):
        assert list(validator.iter_errors(contract)) == []


def test_providers_are_isolated_and_sessions_required(api: Api, runtime: Runtime) -> None:
    connection_id = api.connect()
    version_id = api.draft(connection_id)
    other_connection = api.connect(OTHER, name="theirs")
    for method, path in [
        ("GET", f"/v1/provider/connections/{connection_id}"),
        ("POST", f"/v1/provider/connections/{connection_id}:check"),
        ("GET", "/v1/provider/listings/acme.tool/versions"),
        ("GET", f"/v1/provider/versions/{version_id}"),
        ("PUT", f"/v1/provider/versions/{version_id}"),
        ("POST", f"/v1/provider/versions/{version_id}:submit"),
    ]:
        body = {} if method == "PUT" else None
        assert api.call(OTHER, method, path, body).status_code == 404, path
    theirs = api.call(OTHER, "GET", "/v1/provider/connections").json()["items"]
    assert [c["connectionId"] for c in theirs] == [other_connection]
    # A provider cannot bind another provider's connection to its own version.
    stolen = {"version": "v2", "connectionId": other_connection, "price": 1, "contract": CONTRACT}
    refused = api.call(PROVIDER, "POST", "/v1/provider/listings/acme.tool/versions", stolen)
    assert (refused.status_code, refused.json()["code"]) == (404, "PROVIDER_CONNECTION_NOT_FOUND")

    for action in ("approve", "publish"):
        refused = api.step(PROVIDER, version_id, action)
        assert (refused.status_code, refused.json()["code"]) == (403, "STAFF_REQUIRED")
    refused = api.step(PROVIDER, version_id, "request-changes", {"reason": "x"})
    assert (refused.status_code, refused.json()["code"]) == (403, "STAFF_REQUIRED")

    with runtime.db.read() as session:
        owner = session.get(Version, version_id)
        assert owner is not None
    account_id = api.call(PROVIDER, "GET", "/v1/me").json()["accountId"]
    key, _ = make_api_key(runtime.db, account_id)
    routes = [
        ("GET", "/v1/provider/connections"),
        ("POST", "/v1/provider/connections"),
        ("GET", f"/v1/provider/connections/{connection_id}"),
        ("POST", f"/v1/provider/connections/{connection_id}:check"),
        ("GET", "/v1/provider/listings"),
        ("POST", "/v1/provider/listings"),
        ("POST", "/v1/provider/listings/acme.tool/versions"),
        ("GET", f"/v1/provider/versions/{version_id}"),
        ("POST", f"/v1/provider/versions/{version_id}:submit"),
        ("POST", f"/v1/staff/versions/{version_id}:approve"),
        ("POST", f"/v1/staff/versions/{version_id}:request-changes"),
        ("POST", f"/v1/staff/versions/{version_id}:publish"),
    ]
    for method, path in routes:
        answer = api.client.request(method, path, headers=bearer(key))
        assert (answer.status_code, answer.json()["code"]) == (403, "SESSION_REQUIRED"), path


def test_the_operators_one_step_publish_is_kept_as_operator_steps(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    published = publish(runtime, connection_id)
    with runtime.db.read() as session:
        steps = lifecycle.transitions_of(session, version_id=published.version.id)
    assert [(s.from_state, s.to_state, s.role) for s in steps] == [
        (None, "DRAFT", "operator"),
        ("DRAFT", "PUBLISHED", "operator"),
    ]
    assert owner_id


def test_a_pattern_re2_does_not_compile_is_refused_by_pointer_and_stores_nothing(
    api: Api,
) -> None:
    """Issue 39 item 1: patterns are RE2 (linear time); `^(a+)+$` is, a back-reference, a
    lookahead or a program too big are not (DESIGN.md §7)."""
    connection_id = api.connect()
    version_id = api.draft(connection_id, version="v1")
    before = api.stored(version_id)
    linear = {
        **CONTRACT,
        "requestSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
        },
    }
    bad = {
        **CONTRACT,
        "requestSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(\\w)\\1$"}},
            "$defs": {"big": {"pattern": "(x{1000}){1000}"}},
        },
        "resultSchema": {"type": "object", "patternProperties": {"^(?!tmp)": {}}},
    }
    for method, path in (
        ("POST", "/v1/provider/listings/acme.tool/versions"),
        ("PUT", f"/v1/provider/versions/{version_id}"),
    ):
        body: dict[str, Any] = {"contract": bad}
        if method == "POST":
            body.update(version="v2", connectionId=connection_id, price=3)
        refused = api.call(PROVIDER, method, path, body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "INVALID_CONTRACT"
        errors = refused.json()["errors"]
        assert [e["pointer"] for e in errors] == [
            "/requestSchema/$defs/big/pattern",
            "/requestSchema/properties/code/pattern",
            "/resultSchema/patternProperties/^(?!tmp)",
        ]
        assert all("not an RE2 pattern" in e["detail"] for e in errors)
    listing = api.call(PROVIDER, "GET", "/v1/provider/listings/acme.tool/versions").json()
    assert [v["version"] for v in listing["versions"]] == ["v1"]
    assert api.stored(version_id) == before
    put = api.call(PROVIDER, "PUT", f"/v1/provider/versions/{version_id}", {"contract": linear})
    assert put.status_code == 200, put.text
