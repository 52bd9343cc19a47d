"""The served OpenAPI document: checked in, complete, honest about problems, and the docs page
works offline. Regenerate after an intended API change with:

    .venv/bin/python -m mercato.web.openapi > docs/openapi.json
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from builders.accounts import login, make_account
from builders.invocation_world import SERVICE, World, running_world
from builders.invocations import ScriptedProvider, defined, ok, unknown
from mercato.db.runtime import Runtime
from mercato.web.app import create_app
from mercato.web.openapi import (
    EDGE,
    OPERATIONS,
    SELF_DESCRIBED,
    build_document,
    error_statuses,
)

CHECKED_IN = Path(__file__).parents[3] / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m mercato.web.openapi > docs/openapi.json"
PROBLEM_STATUSES = {"400", "401", "402", "403", "404", "409", "413", "416", "422", "429", "500"}
PROBLEM_STATUSES |= {"502", "503"}


@pytest.fixture
def doc(client: TestClient) -> dict[str, Any]:
    response = client.get("/v1/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_the_served_document_is_the_checked_in_one(client: TestClient) -> None:
    served = client.get("/v1/openapi.json").content
    assert served == CHECKED_IN.read_bytes(), (
        f"docs/openapi.json is out of date; regenerate it with: {REGENERATE}"
    )


def test_every_v1_route_is_declared_and_every_declaration_is_a_route(
    client: TestClient, doc: dict[str, Any]
) -> None:
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == set(_declared(client))
    assert all(path.startswith("/v1/") for path in doc["paths"])
    assert "/v1/openapi.json" not in doc["paths"] and "/v1/docs" not in doc["paths"]
    # iter_route_contexts sees through included routers (app.routes alone would not).
    app_routes = {
        (method.lower(), route.path)
        for route in iter_route_contexts(client.app.routes)  # type: ignore[attr-defined]
        if getattr(route, "include_in_schema", False) and route.path.startswith("/v1/")
        for method in (getattr(route, "methods", None) or set()) - {"HEAD"}
    }
    assert app_routes, "no /v1 routes found: the route walk is broken"
    assert app_routes == documented - {("get", "/v1/openapi.json"), ("get", "/v1/docs")}


def _declared(client: TestClient) -> dict[tuple[str, str], tuple[str, ...]]:
    """The problem codes of every /v1 operation: OPERATIONS' and the self-describing routes'."""
    found = {key: spec.errors for key, spec in OPERATIONS.items()}
    for route in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        codes = (getattr(route, "openapi_extra", None) or {}).get(SELF_DESCRIBED)
        if codes is not None:
            for method in getattr(route, "methods", set()) - {"HEAD"}:
                found[(method.lower(), route.path)] = tuple(codes)
    return found


def test_every_error_is_a_declared_problem_document(
    client: TestClient, doc: dict[str, Any]
) -> None:
    statuses = error_statuses()
    every = _declared(client)
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            errors = every[(method, path)]
            expected = {str(statuses[code]) for code in (*errors, *EDGE)}
            if any(p["in"] == "path" for p in operation.get("parameters", [])):
                expected.add("404")  # a NUL in a path segment (web/edge.py)
            assert "`INVALID_TEXT`" in responses["400"]["description"], (method, path)
            assert "`AMBIGUOUS_CREDENTIALS`" in responses["400"]["description"], (method, path)
            assert {s for s in responses if s in PROBLEM_STATUSES} == expected, (method, path)
            for status in expected:
                content = responses[status]["content"]
                assert list(content) == ["application/problem+json"], (method, path, status)
                schema = content["application/problem+json"]["schema"]["$ref"]
                assert schema.rsplit("/", 1)[1] in {"ProblemDocument", "RateLimitProblem"}
            for status, response in responses.items():
                if status.startswith("2") and status != "204":
                    assert "content" in response, (method, path, status)
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    problem = doc["components"]["schemas"]["ProblemDocument"]
    assert set(problem["required"]) == {"type", "title", "status", "code", "message"}
    assert problem["additionalProperties"] is True
    invoke = doc["paths"]["/v1/services/{service_code}/versions/{version}:invoke"]["post"]
    limited = invoke["responses"]["429"]
    assert limited["content"]["application/problem+json"]["schema"]["$ref"].endswith(
        "RateLimitProblem"
    )
    assert {"Retry-After", "RateLimit", "RateLimit-Policy"} <= set(limited["headers"])
    rate_limit = doc["components"]["schemas"]["RateLimitProblem"]
    assert {"policy", "limit", "windowSeconds", "retryAfter"} <= set(rate_limit["required"])


def test_docs_work_offline(client: TestClient) -> None:
    page = client.get("/v1/docs")
    assert page.status_code == 200
    assert "http://" not in page.text and "https://" not in page.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert len(assets) == 4
    for asset in assets:
        assert asset.startswith("/v1/docs/assets/")
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert len(response.content) > 100
    init = client.get("/v1/docs/assets/docs-init.js").text
    assert '"/v1/openapi.json"' in init
    assert client.get("/openapi.json").status_code == 404
    assert client.get("/docs").status_code == 404


# --- answers agree with the document -----------------------------------------------------


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, default_quota_limit=4) as built:
        yield built


def _check(document: dict[str, Any], method: str, template: str, response: Any) -> None:
    """The answer's status is declared for the operation and its body fits the schema."""
    declared = document["paths"][template][method]["responses"]
    status = str(response.status_code)
    assert status in declared, (method, template, status, response.text)
    content = declared[status].get("content")
    if content is None:
        assert response.content == b""
        return
    media_type = next(iter(content))
    if media_type == "*/*":
        return
    assert response.headers["content-type"].startswith(media_type), (template, status)
    schema = {**content[media_type]["schema"], "components": document["components"]}
    errors = list(Draft202012Validator(schema).iter_errors(response.json()))
    assert not errors, (method, template, status, [e.message for e in errors])


def test_real_answers_match_the_document(world: World, provider: ScriptedProvider) -> None:
    document = build_document(world.client.app)  # type: ignore[arg-type]
    invoke = "/v1/services/{service_code}/versions/{version}:invoke"
    provider.script(ok({"echo": 1}), defined(400, "NOPE"), unknown())
    seen = [
        ("post", invoke, world.invoke({"n": 1}, key="a")),
        ("post", invoke, world.invoke({"n": 2}, key="b")),
        ("post", invoke, world.invoke({"n": 3}, key="c")),
        ("post", invoke, world.invoke({"n": 4}, key=None)),
        ("post", invoke, world.invoke({"n": 1}, key="g", service="nope.nope")),
        ("post", invoke, world.invoke("not an object", key="d")),
        ("post", invoke, world.invoke({"n": 9}, key="e")),
        ("post", invoke, world.invoke({"n": 9}, key="f")),
        ("get", "/v1/invocations", world.get("/v1/invocations")),
        ("get", "/v1/invocations", world.get("/v1/invocations?cursor=bogus")),
        ("get", "/v1/invocations/{invocation_id}", world.get("/v1/invocations/inv_missing")),
        ("get", "/v1/balance", world.get("/v1/balance")),
        ("get", "/v1/balance", world.client.get("/v1/balance")),
        ("get", "/v1/rate-limit", world.get("/v1/rate-limit")),
        ("get", "/v1/me", world.get("/v1/me")),
        ("get", "/v1/api-keys", world.get("/v1/api-keys")),
        ("get", "/v1/catalog/listings", world.client.get("/v1/catalog/listings")),
        (
            "get",
            "/v1/catalog/listings/{service_code}",
            world.client.get(f"/v1/catalog/listings/{SERVICE}"),
        ),
        (
            "get",
            "/v1/catalog/listings/{service_code}/versions/{version}/contract",
            world.client.get(f"/v1/catalog/listings/{SERVICE}/versions/v1/contract"),
        ),
        (
            "get",
            "/v1/catalog/listings/{service_code}/versions/{version}",
            world.client.get(f"/v1/catalog/listings/{SERVICE}/versions/v9"),
        ),
        ("get", "/v1/catalog/listings", world.client.get("/v1/catalog/listings?limit=0")),
    ]
    statuses = [response.status_code for _, _, response in seen]
    assert statuses[:8] == [200, 422, 202, 400, 404, 422, 200, 429], statuses
    for method, template, response in seen:
        _check(document, method, template, response)
    receipt_id = seen[0][2].json()["invocationId"]
    _check(
        document,
        "get",
        "/v1/invocations/{invocation_id}",
        world.get(f"/v1/invocations/{receipt_id}"),
    )


def test_session_answers_match_the_document(runtime: Runtime) -> None:
    make_account(runtime.db, "caller@example.com")
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        document = build_document(client.app)  # type: ignore[arg-type]
        pair = login(client)
        session = {"Authorization": f"Bearer {pair['accessToken']}"}
        created = client.post("/v1/api-keys", json={"name": "docs"}, headers=session)
        key = created.json()["apiKey"]
        revoke = "/v1/api-keys/{key_id}:revoke"
        seen = [
            ("post", "/v1/api-keys", created),
            ("post", "/v1/api-keys", client.post("/v1/api-keys", json={}, headers=session)),
            ("get", "/v1/api-keys", client.get("/v1/api-keys", headers=session)),
            (
                "get",
                "/v1/api-keys",
                client.get("/v1/api-keys", headers={"Authorization": f"Bearer {key}"}),
            ),
            (
                "post",
                revoke,
                client.post(f"/v1/api-keys/{created.json()['keyId']}:revoke", headers=session),
            ),
            ("post", revoke, client.post("/v1/api-keys/key_missing:revoke", headers=session)),
            ("get", "/v1/cases", client.get("/v1/cases", headers=session)),
            ("get", "/v1/cases/{case_id}", client.get("/v1/cases/case_x", headers=session)),
            (
                "post",
                "/v1/auth/refresh",
                client.post("/v1/auth/refresh", json={"refreshToken": pair["refreshToken"]}),
            ),
            (
                "post",
                "/v1/auth/login",
                client.post(
                    "/v1/auth/login", json={"email": "caller@example.com", "password": "x"}
                ),
            ),
            ("post", "/v1/auth/logout", client.post("/v1/auth/logout", headers=session)),
        ]
        statuses = [response.status_code for _, _, response in seen]
        assert statuses == [201, 400, 200, 403, 200, 404, 200, 404, 200, 401, 204], statuses
        for method, template, response in seen:
            _check(document, method, template, response)
