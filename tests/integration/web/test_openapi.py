"""The served OpenAPI document: generated from the routes' own declarations, checked in,
complete, honest about problems, and the docs page works offline. Regenerate after an intended
API change with:

    .venv/bin/python -m mercato.web.export > docs/openapi.json
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from builders.accounts import login, make_account
from builders.invocation_world import SERVICE, World, running_world
from builders.invocations import ScriptedProvider, defined, ok, unknown
from mercato.core.errors import MercatoError
from mercato.db.runtime import Runtime
from mercato.web import openapi
from mercato.web.app import create_app
from mercato.web.openapi import build_document
from mercato.web.problems import EDGE_ERRORS, InvalidRequest

CHECKED_IN = Path(__file__).parents[3] / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m mercato.web.export > docs/openapi.json"
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


def error_statuses() -> dict[str, int]:
    """Every problem code of the error classes (the app has imported every domain's), with
    its HTTP status."""
    found: dict[str, int] = {InvalidRequest.code: InvalidRequest.status}
    stack: list[type[MercatoError]] = [MercatoError]
    while stack:
        cls = stack.pop()
        assert found.setdefault(cls.code, cls.status) == cls.status, cls
        stack.extend(cls.__subclasses__())
    return found


def _v1_routes(app: Any) -> list[Any]:
    """The /v1 API routes (as route contexts, which read like the routes)."""
    # iter_route_contexts sees through included routers (app.routes alone would not).
    return [
        context
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute)
        and context.include_in_schema
        and (context.path or "").startswith("/v1/")
    ]


def test_every_v1_route_declares_its_answers_and_no_overlay_is_left(client: TestClient) -> None:
    routes = _v1_routes(client.app)
    assert len(routes) >= 25
    for route in routes:
        # The success answer is a model (or a documented binary/empty answer) ...
        success = route.response_model is not None or route.status_code == 204
        success = success or "content" in route.responses.get(200, {})
        assert success, route.path
        # ... and the errors were declared from the error classes (web.problems.declare).
        assert 400 in route.responses and "`INVALID_TEXT`" in route.responses[400]["description"]
    assert not hasattr(openapi, "OPERATIONS")


def test_every_v1_route_is_documented_and_nothing_else(
    client: TestClient, doc: dict[str, Any]
) -> None:
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert all(path.startswith("/v1/") for path in doc["paths"])
    assert "/v1/openapi.json" not in doc["paths"] and "/v1/docs" not in doc["paths"]
    app_routes = {
        (method.lower(), route.path)
        for route in _v1_routes(client.app)
        for method in (route.methods or set()) - {"HEAD"}
    }
    assert app_routes, "no /v1 routes found: the route walk is broken"
    assert app_routes == documented


def test_every_error_is_a_declared_problem_document(doc: dict[str, Any]) -> None:
    statuses = error_statuses()
    edge = {cls.code for cls in EDGE_ERRORS}
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            expected = {s for s in responses if s[0] in "45"}
            assert expected <= PROBLEM_STATUSES, (method, path, expected)
            for status in expected:
                # Each documented code is answered with the status its class names.
                codes = re.findall(r"`([A-Z_]+)`", responses[status]["description"])
                assert codes, (method, path, status)
                for code in codes:
                    in_path = code == "INVALID_TEXT" and status == "404"
                    assert in_path or str(statuses[code]) == status, (method, path, code, status)
            if any(p["in"] == "path" for p in operation.get("parameters", [])):
                # a NUL in a path segment (web/edge.py)
                assert "`INVALID_TEXT`" in responses["404"]["description"], (method, path)
            for code in edge:
                assert f"`{code}`" in responses["400"]["description"], (method, path)
            if operation.get("security"):
                assert "`UNAUTHENTICATED`" in responses["401"]["description"], (method, path)
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
