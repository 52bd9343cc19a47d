"""The access matrix (OWASP API1/API5), generated from the app's routes.

Every `/v1` operation and every HTML page route whose path takes an id has an entry in MATRIX;
a test fails when a route is added without one (or an entry outlives its route). Per entry:
- no credential → 401 problem (API) or a 303 to the login page (pages);
- another account's API key and another account's session → 404 for objects the caller does not
  own (403 where a role decides: staff operations, session-only operations called with a key);
- an API key where a session is required → 403 SESSION_REQUIRED (API) or the login page (pages:
  an `Authorization` header is no browser session);
- staff and provider operations refused to plain callers;
- the owner itself reaches its object (GET entries), so a refusal is about who asks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from builders.invocation_world import SERVICE
from builders.invocations import ScriptedProvider
from builders.security import Party, SecurityWorld, build_security_world

Role = Literal["public", "any", "session", "staff"]
Holder = Literal["owner", "provider", "staff", "nobody"]


@dataclass(frozen=True)
class Entry:
    role: Role
    holder: Holder = "nobody"  # who owns the object the path names ("nobody": not owned)
    body: Any = None


_OWNED = Entry("any", "owner")
_OWNED_SESSION = Entry("session", "owner")
_PUBLIC = Entry("public")
_PROVIDER_SESSION = Entry("session", "provider")

API: dict[tuple[str, str], Entry] = {
    ("post", "/v1/auth/login"): _PUBLIC,
    ("post", "/v1/auth/refresh"): _PUBLIC,
    ("post", "/v1/auth/logout"): Entry(
        "session"
    ),  # a refresh token in the body is its own credential
    ("get", "/v1/me"): Entry("session"),
    ("get", "/v1/api-keys"): Entry("session"),
    ("post", "/v1/api-keys"): Entry("session", body={"name": "k"}),
    ("post", "/v1/api-keys/{key_id}:revoke"): _OWNED_SESSION,
    ("put", "/v1/api-keys/{key_id}/spend-limit"): Entry(
        "session", "owner", body={"points": 10, "period": "DAY"}
    ),
    ("delete", "/v1/api-keys/{key_id}/spend-limit"): _OWNED_SESSION,
    ("get", "/v1/catalog/listings"): _PUBLIC,
    ("get", "/v1/catalog/listings/{service_code}"): _PUBLIC,
    ("get", "/v1/catalog/listings/{service_code}/versions/{version}"): _PUBLIC,
    ("get", "/v1/catalog/listings/{service_code}/versions/{version}/contract"): _PUBLIC,
    ("get", "/v1/catalog/services"): _PUBLIC,
    ("get", "/v1/catalog/services/{service_code}"): _PUBLIC,
    ("get", "/v1/catalog/services/{service_code}/versions/{version}"): _PUBLIC,
    ("get", "/v1/catalog/services/{service_code}/versions/{version}/contract"): _PUBLIC,
    ("post", "/v1/services/{service_code}/versions/{version}:invoke"): Entry("any"),
    ("get", "/v1/invocations"): Entry("any"),
    ("get", "/v1/invocations/{invocation_id}"): _OWNED,
    ("get", "/v1/invocations/{invocation_id}/artifacts/{artifact_id}"): _OWNED,
    ("get", "/v1/balance"): Entry("any"),
    ("get", "/v1/rate-limit"): Entry("any"),
    # The id travels in the body: the owner's call, disputed by someone else.
    ("post", "/v1/disputes"): Entry("session", "owner", body="dispute"),
    ("post", "/v1/content-reports"): Entry("session"),
    ("get", "/v1/cases"): Entry("session"),
    ("get", "/v1/cases/{case_id}"): _OWNED_SESSION,
    ("post", "/v1/cases/{case_id}:decide"): Entry(
        "staff", "owner", body={"decision": "REJECT", "reason": "no"}
    ),
    ("get", "/v1/schemas/contract"): _PUBLIC,
    ("get", "/v1/provider/connections"): Entry("session"),
    ("post", "/v1/provider/connections"): Entry(
        "session", body={"name": "m", "baseUrl": "https://p.example", "credential": "c-01234567"}
    ),
    ("get", "/v1/provider/connections/{connection_id}"): _PROVIDER_SESSION,
    ("patch", "/v1/provider/connections/{connection_id}"): Entry(
        "session", "provider", body={"maxInFlight": 8}
    ),
    ("post", "/v1/provider/connections/{connection_id}:check"): _PROVIDER_SESSION,
    ("get", "/v1/provider/listings"): Entry("session"),
    ("post", "/v1/provider/listings"): Entry(
        "session", body={"serviceCode": "acme.matrix", "displayName": "M"}
    ),
    ("put", "/v1/provider/listings/{service_code}"): Entry(
        "session", "provider", body={"publisherName": "Matrix"}
    ),
    ("get", "/v1/provider/listings/{service_code}/versions"): _PROVIDER_SESSION,
    ("post", "/v1/provider/listings/{service_code}/versions"): Entry(
        "session",
        "provider",
        body={"version": "v9", "connectionId": "pcon_x", "price": 1, "contract": {}},
    ),
    ("get", "/v1/provider/versions/{version_id}"): _PROVIDER_SESSION,
    ("put", "/v1/provider/versions/{version_id}"): Entry("session", "provider", body={}),
    ("post", "/v1/provider/versions/{version_id}:submit"): _PROVIDER_SESSION,
    ("post", "/v1/staff/versions/{version_id}:approve"): Entry("staff", "provider"),
    ("post", "/v1/staff/versions/{version_id}:request-changes"): Entry(
        "staff", "provider", body={"reason": "why"}
    ),
    ("post", "/v1/staff/versions/{version_id}:publish"): Entry("staff", "provider"),
    ("get", "/v1/openapi.json"): _PUBLIC,
    ("get", "/v1/docs"): _PUBLIC,
    ("get", "/v1/docs/assets/docs-init.js"): _PUBLIC,
}

_PAGE_OWNED = Entry("session", "owner")
_PAGE_PROVIDER = Entry("session", "provider")
_PAGE_STAFF = Entry("staff", "provider")

PAGES: dict[tuple[str, str], Entry] = {
    ("get", "/listings/{service_code}"): _PUBLIC,
    ("post", "/listings/{service_code}/versions/{version}/call"): Entry("session"),
    ("post", "/listings/{service_code}/report"): Entry("session"),
    ("get", "/account/api-keys/{key_id}/revoke"): _PAGE_OWNED,
    ("post", "/account/api-keys/{key_id}/revoke"): _PAGE_OWNED,
    ("get", "/receipts/{invocation_id}"): _PAGE_OWNED,
    ("get", "/receipts/{invocation_id}/artifacts/{artifact_id}"): _PAGE_OWNED,
    ("post", "/receipts/{invocation_id}/dispute"): _PAGE_OWNED,
    ("get", "/cases/{case_id}"): _PAGE_OWNED,
    ("get", "/provider/connections/{connection_id}"): _PAGE_PROVIDER,
    ("post", "/provider/connections/{connection_id}"): _PAGE_PROVIDER,
    ("post", "/provider/connections/{connection_id}/check"): _PAGE_PROVIDER,
    ("get", "/provider/listings/{service_code}"): _PAGE_PROVIDER,
    ("post", "/provider/listings/{service_code}/drafts"): _PAGE_PROVIDER,
    ("post", "/provider/listings/{service_code}/publisher"): _PAGE_PROVIDER,
    ("get", "/provider/versions/{version_id}"): _PAGE_PROVIDER,
    ("post", "/provider/versions/{version_id}"): _PAGE_PROVIDER,
    ("post", "/provider/versions/{version_id}/submit"): _PAGE_PROVIDER,
    ("get", "/staff/connections/{connection_id}"): _PAGE_STAFF,
    ("post", "/staff/connections/{connection_id}/approve"): _PAGE_STAFF,
    ("get", "/staff/versions/{version_id}"): _PAGE_STAFF,
    ("post", "/staff/versions/{version_id}/approve"): _PAGE_STAFF,
    ("post", "/staff/versions/{version_id}/publish"): _PAGE_STAFF,
    ("post", "/staff/versions/{version_id}/request-changes"): _PAGE_STAFF,
    ("get", "/staff/cases/{case_id}"): Entry("staff", "owner"),
    ("post", "/staff/cases/{case_id}/decide"): Entry("staff", "owner"),
    ("post", "/staff/holds/{hold_id}/release"): _PAGE_STAFF,
    ("get", "/staff/invocations/{invocation_id}"): Entry("staff", "owner"),
    ("post", "/staff/invocations/{invocation_id}/resolve"): Entry("staff", "owner"),
}


def routes_of(app: Any) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(every /v1 operation, every page route with an id in its path) the app serves."""
    api: set[tuple[str, str]] = set()
    pages: set[tuple[str, str]] = set()
    for route in iter_route_contexts(app.routes):
        path = getattr(route, "path", "")
        methods = getattr(route, "methods", None) or set()
        for method in methods - {"HEAD"}:
            key = (method.lower(), path)
            if path.startswith("/v1/"):
                api.add(key)
            elif "{" in path and not path.startswith(("/static", "/health", "/metrics")):
                pages.add(key)
    return api, pages


@pytest.fixture
def security(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[SecurityWorld]:
    built = build_security_world(db_url, tmp_path, provider)
    yield built
    built.world.provider_client.close()
    built.world.runtime.db.dispose()


def _ids(security: SecurityWorld) -> dict[str, str]:
    return {
        "service_code": SERVICE,
        "version": "v1",
        "invocation_id": security.session_call,
        "artifact_id": "art_missing",
        "case_id": security.case_id,
        "key_id": security.owner.key_id,
        "connection_id": security.connection_id,
        "version_id": security.draft_version_id,
        "hold_id": security.hold_id,
    }


def _api_call(
    security: SecurityWorld, method: str, template: str, entry: Entry, headers: dict[str, str]
) -> Any:
    path = template.format(**_ids(security))
    headers = {**headers, "Idempotency-Key": "matrix-1"}
    body = entry.body
    if body == "dispute":
        body = {"invocationId": security.session_call, "reason": "mine now"}
    if method == "get":
        return security.client.get(path, headers=headers)
    if body is None and template.endswith(":invoke"):
        body = {"n": 1}
    return security.client.request(method.upper(), path, json=body, headers=headers)


def _problem(response: Any, status: int, code: str | None = None) -> None:
    assert response.status_code == status, (response.request.url, response.text[:300])
    assert response.headers["content-type"].startswith("application/problem+json")
    if code is not None:
        assert response.json()["code"] == code, response.text[:300]


def test_every_route_is_in_the_matrix(client: TestClient) -> None:
    api, pages = routes_of(client.app)
    assert api == set(API), f"add to API: {sorted(api - set(API))}; stale: {sorted(set(API) - api)}"
    assert pages == set(PAGES), (
        f"add to PAGES: {sorted(pages - set(PAGES))}; stale: {sorted(set(PAGES) - pages)}"
    )


def test_api_access_matrix(security: SecurityWorld) -> None:
    other, owner = security.other, security.owner
    checked = 0
    for (method, template), entry in API.items():
        if entry.role == "public":
            response = _api_call(security, method, template, entry, {})
            assert response.status_code != 401, (template, response.text[:200])
            continue
        anonymous = _api_call(security, method, template, entry, {})
        _problem(anonymous, 401, "UNAUTHENTICATED")
        assert anonymous.headers["www-authenticate"].lower().startswith("bearer")
        forged = _api_call(
            security, method, template, entry, {"Authorization": "Bearer mercato_live_forged"}
        )
        _problem(forged, 401, "UNAUTHENTICATED")
        if entry.role in ("session", "staff"):
            for party in (other, owner, security.staff):
                refused = _api_call(security, method, template, entry, party.key_headers())
                _problem(refused, 403, "SESSION_REQUIRED")
        if entry.role == "staff":
            for party in (other, owner, security.provider):
                refused = _api_call(security, method, template, entry, party.session_headers())
                _problem(refused, 403, "STAFF_REQUIRED")
        elif entry.holder in ("owner", "provider"):
            holder = owner if entry.holder == "owner" else security.provider
            strangers = [other.session_headers()]
            if entry.role == "any":
                strangers.append(other.key_headers())
            for headers in strangers:
                refused = _api_call(security, method, template, entry, headers)
                assert refused.status_code == 404, (template, refused.text[:300])
                _problem(refused, 404)
            if method == "get":
                mine = holder.session_headers() if entry.role == "session" else holder.key_headers()
                reached = _api_call(security, method, template, entry, mine)
                if "artifact" in template:  # the call is reached; only the artifact is missing
                    _problem(reached, 404, "ARTIFACT_NOT_FOUND")
                    _problem(refused, 404, "INVOCATION_NOT_FOUND")
                else:
                    assert reached.status_code == 200, (template, reached.text[:300])
        checked += 1
    assert checked >= 15


def _page_call(
    security: SecurityWorld, http: TestClient, method: str, template: str, **extra: Any
) -> Any:
    path = template.format(**_ids(security))
    if method == "get":
        return http.get(path, follow_redirects=False, **extra)
    return http.post(
        path, data={"csrf_token": security.csrf(http)}, follow_redirects=False, **extra
    )


def _is_login_redirect(response: Any) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith("/login")


def test_page_access_matrix(security: SecurityWorld) -> None:
    signed_out = security.browser(None)
    stranger = security.browser(security.other)
    caller = security.browser(security.owner)
    for (method, template), entry in PAGES.items():
        if entry.role == "public":
            assert _page_call(security, signed_out, method, template).status_code == 200
            continue
        anonymous = _page_call(security, signed_out, method, template)
        assert _is_login_redirect(anonymous), (method, template, anonymous.status_code)
        with_key = _page_call(
            security, signed_out, method, template, headers=security.owner.key_headers()
        )
        assert _is_login_redirect(with_key), (method, template, with_key.status_code)
        if entry.role == "staff":
            for http in (stranger, caller):
                refused = _page_call(security, http, method, template)
                assert refused.status_code == 403, (method, template, refused.status_code)
        elif entry.holder != "nobody":
            refused = _page_call(security, stranger, method, template)
            assert refused.status_code == 404, (method, template, refused.status_code)
            if entry.holder == "provider":
                refused = _page_call(security, caller, method, template)
                assert refused.status_code == 404, (method, template, refused.status_code)
        if method == "get" and entry.holder != "nobody":
            holder: Party = {
                "owner": security.owner,
                "provider": security.provider,
                "staff": security.staff,
            }[entry.holder]
            mine = security.browser(security.staff if entry.role == "staff" else holder)
            reached = _page_call(security, mine, method, template)
            assert reached.status_code in (200, 404 if "artifact" in template else 200), (
                method,
                template,
                reached.status_code,
            )
