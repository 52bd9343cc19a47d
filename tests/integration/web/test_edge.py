"""The edge refuses text no store can hold and ambiguous credentials, before anything is written.

U+0000 (DESIGN.md §5): every path parameter, query parameter, header parameter and string member
of the request body of every operation in the served OpenAPI document gets a NUL in turn, sent
with a valid credential (an API key, or a session where the operation needs one); each answer is
404 `INVALID_TEXT` for a path segment and 400 `INVALID_TEXT` otherwise, naming the field, and no
row of any table changes. Focused cases follow for the inputs the issue names, the web pages, the
two-Authorization-headers rule, and what is not a NUL.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from builders.invocation_world import SERVICE
from builders.invocations import ScriptedProvider
from builders.security import Party, SecurityWorld, build_security_world
from mercato.db.base import Base
from mercato.db.uow import Database

NUL_TEXT = "a\x00b"
_KEYS = itertools.count(1)


@pytest.fixture
def security(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[SecurityWorld]:
    built = build_security_world(db_url, tmp_path, provider)
    yield built
    built.world.provider_client.close()
    built.world.runtime.db.dispose()


def snapshot(db: Database) -> dict[str, list[str]]:
    """Every row of every table, as sorted text (to prove a refusal wrote nothing)."""
    rows: dict[str, list[str]] = {}
    with db.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            found = conn.execute(text(f'SELECT * FROM "{table.name}"'))
            rows[table.name] = sorted(repr(tuple(row)) for row in found)
    return rows


def assert_invalid_text(response: httpx.Response, status: int, where: str, name: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "INVALID_TEXT", problem
    assert problem["status"] == status
    assert (problem["field"], problem["in"]) == (name, where), problem


# --- every text input of the OpenAPI document --------------------------------------------


@dataclass
class Case:
    """One request with a NUL in exactly one input, and the answer it must get."""

    method: str
    template: str
    where: str
    name: str
    path: dict[str, str]
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None

    @property
    def status(self) -> int:
        return 404 if self.where == "path" else 400

    @property
    def field_name(self) -> str:
        return "/" + self.name if self.where == "body" else self.name.lower()

    def send(self, security: SecurityWorld) -> httpx.Response:
        url = self.template.format(**{k: quote(v, safe="") for k, v in self.path.items()})
        content = orjson.dumps(self.body) if self.body is not None else None
        headers = {**self.headers}
        if content is not None:
            headers["Content-Type"] = "application/json"
        return security.client.request(
            self.method.upper(), url, params=self.query, headers=headers, content=content
        )


def _real_path_values(security: SecurityWorld) -> dict[str, str]:
    return {
        "service_code": SERVICE,
        "version": "v1",
        "invocation_id": security.session_call,
        "case_id": security.case_id,
        "key_id": security.spare_key_id,
        "artifact_id": "art_missing",
        "connection_id": security.connection_id,
        "version_id": security.draft_version_id,
    }


def _plausible_body(security: SecurityWorld) -> dict[str, Any]:
    """A plausible value per body member the document names (the NUL then goes in one)."""
    return {
        "email": "caller@example.com",
        "password": "correct horse battery staple",
        "refreshToken": security.owner.refresh_token,
        "name": "key",
        "invocationId": security.session_call,
        "reason": "not what I asked for",
        "serviceCode": SERVICE,
        "version": "v1",
        "category": "OTHER",
        "text": "a report",
        "decision": "deny",
        "baseUrl": "https://provider.example",
        "credential": "a-credential-0123456789",
        "displayName": "A listing",
        "description": "Described.",
        "publisherName": "A publisher",
        "connectionId": security.connection_id,
        "period": "DAY",
    }


def _party(operation: dict[str, Any], security: SecurityWorld) -> Party:
    """The least privileged party the document says the operation accepts."""
    described = " ".join(r.get("description", "") for r in operation["responses"].values())
    if "STAFF_REQUIRED" in described:
        return security.staff
    return security.owner


def _credential(operation: dict[str, Any], party: Party) -> dict[str, str]:
    described = " ".join(r.get("description", "") for r in operation["responses"].values())
    if "SESSION_REQUIRED" in described or "STAFF_REQUIRED" in described:
        return party.session_headers()
    return party.key_headers()


def _body_members(document: dict[str, Any], operation: dict[str, Any]) -> tuple[list[str], bool]:
    """(the string members of the request body's schema, whether it takes any member)."""
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return [], False
    schema = content["schema"]
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    members = [
        name
        for name, member in schema.get("properties", {}).items()
        if member.get("type") == "string"
        or any(option.get("type") == "string" for option in member.get("anyOf", ()))
    ]
    return members, schema.get("additionalProperties") is True


def cases_of(document: dict[str, Any], security: SecurityWorld) -> list[Case]:
    """One Case per text input of every operation in `document`."""
    found: list[Case] = []
    real_path = _real_path_values(security)
    plausible = _plausible_body(security)
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            party = _party(operation, security)
            parameters = operation.get("parameters", [])
            path = {p["name"]: real_path[p["name"]] for p in parameters if p["in"] == "path"}
            headers = _credential(operation, party)
            headers.update(
                {p["name"]: f"edge-{next(_KEYS)}" for p in parameters if p["in"] == "header"}
            )
            members, open_object = _body_members(document, operation)
            body = {m: plausible[m] for m in members} if members or open_object else None
            if open_object and body is not None:
                body.setdefault("n", 1)
                members = [*members, "note"]  # an open object's own member
            base = Case(method, template, "", "", path, headers=headers, body=body)
            for parameter in parameters:
                where, name = parameter["in"], parameter["name"]
                if where == "path":
                    found.append(_variant(base, where, name, path={**path, name: NUL_TEXT}))
                elif where == "query":
                    found.append(_variant(base, where, name, query={name: NUL_TEXT}))
                elif where == "header":
                    found.append(_variant(base, where, name, headers={**headers, name: NUL_TEXT}))
            for member in members:
                assert body is not None
                found.append(_variant(base, "body", member, body={**body, member: NUL_TEXT}))
    return found


def _variant(base: Case, where: str, name: str, **changes: Any) -> Case:
    values = {**base.__dict__, "where": where, "name": name, **changes}
    return Case(**values)


def test_every_text_input_of_the_document_refuses_a_nul_and_writes_nothing(
    security: SecurityWorld,
) -> None:
    document = security.client.get("/v1/openapi.json").json()
    cases = cases_of(document, security)
    covered = {(c.method, c.template) for c in cases}
    assert len(covered) >= 20 and len(cases) >= 40, len(cases)
    assert {c.where for c in cases} == {"path", "query", "header", "body"}
    db = security.world.runtime.db
    before = snapshot(db)
    wrong: list[str] = []
    for case in cases:
        response = case.send(security)
        problem = response.json() if response.content else {}
        expected = (case.status, "INVALID_TEXT", case.field_name, case.where)
        got = (response.status_code, problem.get("code"), problem.get("field"), problem.get("in"))
        if got != expected or not response.headers["content-type"].startswith(
            "application/problem+json"
        ):
            wrong.append(f"{case.method.upper()} {case.template} {case.where}:{case.name} → {got}")
    assert not wrong, "\n".join(wrong)
    assert snapshot(db) == before


# --- focused cases -----------------------------------------------------------------------


def test_a_nul_in_the_login_email_is_refused_before_any_attempt_is_counted(
    security: SecurityWorld,
) -> None:
    db = security.world.runtime.db
    before = snapshot(db)
    password = "a password that must not be echoed"
    response = security.client.post(
        "/v1/auth/login", json={"email": "caller\x00@example.com", "password": password}
    )
    assert_invalid_text(response, 400, "body", "/email")
    assert password not in response.text
    assert snapshot(db) == before


def test_a_nul_in_a_listing_code_is_a_404_naming_the_path_parameter(
    security: SecurityWorld,
) -> None:
    for path in (
        "/v1/catalog/listings/acme%00echo",
        "/v1/catalog/services/acme.echo%00/versions/v1",
        "/v1/catalog/listings/acme.echo/versions/v1%00/contract",
    ):
        response = security.client.get(path)
        name = "version" if "v1%00" in path else "service_code"
        assert_invalid_text(response, 404, "path", name)
    page = security.client.get("/listings/acme%00echo")
    assert_invalid_text(page, 404, "path", "service_code")


def test_a_nul_in_an_idempotency_key_is_refused_and_opens_no_case(
    security: SecurityWorld,
) -> None:
    db = security.world.runtime.db
    before = snapshot(db)
    response = security.client.post(
        "/v1/content-reports",
        json={"serviceCode": SERVICE, "version": "v1", "category": "OTHER", "text": "spam"},
        headers={**security.other.session_headers(), "Idempotency-Key": "report\x00-1"},
    )
    assert_invalid_text(response, 400, "header", "idempotency-key")
    invoke = security.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke",
        json={"n": 1},
        headers={**security.owner.key_headers(), "Idempotency-Key": "call\x00-1"},
    )
    assert_invalid_text(invoke, 400, "header", "idempotency-key")
    assert snapshot(db) == before


def test_a_nul_in_a_search_term_or_query_is_refused(security: SecurityWorld) -> None:
    page = security.client.get("/", params={"q": "ranking\x00"})
    assert_invalid_text(page, 400, "query", "q")
    listed = security.client.get(
        "/v1/invocations", params={"status": "\x00"}, headers=security.owner.key_headers()
    )
    assert_invalid_text(listed, 400, "query", "status")
    nameless = security.client.get("/v1/catalog/listings?li%00mit=1")
    assert_invalid_text(nameless, 400, "query", "li\\u0000mit")


def test_a_nul_in_the_web_login_form_is_refused_and_records_nothing(
    security: SecurityWorld,
) -> None:
    db = security.world.runtime.db
    browser = security.browser(None)
    csrf = security.csrf(browser)
    before = snapshot(db)
    response = browser.post(
        "/login",
        data={"email": "caller@example.com\x00", "password": "whatever", "csrf_token": csrf},
        follow_redirects=False,
    )
    assert_invalid_text(response, 400, "body", "email")
    assert snapshot(db) == before


def test_a_nul_anywhere_in_an_invoke_body_consumes_nothing(security: SecurityWorld) -> None:
    db = security.world.runtime.db
    before = snapshot(db)
    bodies = {
        "/tags/1/deep": {"n": 1, "tags": ["fine", {"deep": "x\x00"}]},
        "/tags/0/ke\\u0000y": {"n": 1, "tags": [{"ke\x00y": 1}]},
    }
    for pointer, body in bodies.items():
        response = security.client.post(
            f"/v1/services/{SERVICE}/versions/v1:invoke",
            content=orjson.dumps(body),
            headers={**security.owner.key_headers(), "Idempotency-Key": f"nul-{pointer}"},
        )
        assert_invalid_text(response, 400, "body", pointer)
    assert snapshot(db) == before


def test_an_escaped_backslash_before_u0000_is_no_nul(security: SecurityWorld) -> None:
    body = b'{"n": 1, "note": "C:\\\\u0000 is a path, not a NUL"}'
    assert orjson.loads(body)["note"].startswith("C:\\u0000")
    response = security.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke",
        content=body,
        headers={**security.owner.key_headers(), "Idempotency-Key": "escaped-backslash"},
    )
    assert response.status_code == 200, response.text


def test_a_nul_in_a_cookie_never_reaches_the_session_lookup(security: SecurityWorld) -> None:
    response = security.client.get(
        "/account", headers={"Cookie": "mercato_session=mercato_at_\x00"}
    )
    assert_invalid_text(response, 400, "header", "cookie")


# --- two Authorization headers -----------------------------------------------------------


def _twice(*values: str) -> list[tuple[str, str]]:
    return [("Authorization", value) for value in values]


@pytest.mark.parametrize("path", ["/v1/balance", "/v1/me", "/v1/catalog/listings", "/account", "/"])
def test_two_authorization_headers_are_ambiguous(security: SecurityWorld, path: str) -> None:
    db = security.world.runtime.db
    before = snapshot(db)
    key, session = security.owner.key_headers(), security.other.session_headers()
    for pair in (
        _twice(key["Authorization"], key["Authorization"]),
        _twice(key["Authorization"], session["Authorization"]),
        _twice(session["Authorization"], "Bearer mercato_live_unknown"),
    ):
        response = security.client.get(path, headers=pair)  # type: ignore[arg-type]
        assert response.status_code == 400, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["code"] == "AMBIGUOUS_CREDENTIALS"
        assert "mercato_live_" not in response.text and "mercato_at_" not in response.text
    assert snapshot(db) == before  # not even the key's last use


def test_two_authorization_headers_never_invoke(security: SecurityWorld) -> None:
    db = security.world.runtime.db
    before = snapshot(db)
    headers = [
        *_twice(security.owner.key_headers()["Authorization"], "Bearer x"),
        ("Idempotency-Key", "ambiguous-1"),
        ("Content-Type", "application/json"),
    ]
    response = security.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke",
        content=b'{"n": 1}',
        headers=headers,  # type: ignore[arg-type]
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "AMBIGUOUS_CREDENTIALS"
    assert snapshot(db) == before


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_refusals_are_counted_under_the_route_they_were_sent_to(security: SecurityWorld) -> None:
    route = "/v1/services/{service_code}/versions/{version}:invoke"
    counted = {"method": "POST", "route": route, "status": "400"}
    rejected = {"outcome": "rejected", "settlement": "NONE"}
    before = _count("mercato_http_requests_total", **counted)
    rejected_before = _count("mercato_invokes_total", **rejected)
    response = security.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke",
        json={"n": 1, "note": "\x00"},
        headers={**security.owner.key_headers(), "Idempotency-Key": "counted-1"},
    )
    assert response.status_code == 400
    assert _count("mercato_http_requests_total", **counted) == before + 1
    assert _count("mercato_invokes_total", **rejected) == rejected_before + 1
    nowhere = {"method": "GET", "route": "unmatched", "status": "404"}
    nowhere_before = _count("mercato_http_requests_total", **nowhere)
    assert security.client.get("/nothing/he%00re").status_code == 404
    assert _count("mercato_http_requests_total", **nowhere) == nowhere_before + 1
