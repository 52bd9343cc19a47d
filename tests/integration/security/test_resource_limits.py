"""Resource limits through the ASGI app (OWASP API4): body caps and JSON nesting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.catalog import example_contract, publish
from builders.invocations import ScriptedProvider
from builders.security import SecurityWorld, build_security_world
from mercato.core.json_depth import MAX_JSON_DEPTH, nesting_exceeds
from mercato.web.limits import MAX_BODY_BYTES

BIG = "acme.big"  # requestMaxBytes 65536, open schemas


@pytest.fixture
def security(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[SecurityWorld]:
    built = build_security_world(db_url, tmp_path, provider)
    publish(
        built.world.runtime,
        built.connection_id,
        service_code=BIG,
        contract=example_contract(artifactContract=None, resultSchema={"type": "object"}),
    )
    yield built
    built.world.provider_client.close()
    built.world.runtime.db.dispose()


def _invoke(security: SecurityWorld, raw: bytes, key: str, service: str = BIG) -> object:
    return security.client.post(
        f"/v1/services/{service}/versions/v1:invoke",
        content=raw,
        headers={**security.owner.key_headers(), "Idempotency-Key": key},
    )


def test_over_the_contract_limit_is_413_and_consumes_nothing(
    security: SecurityWorld, provider: ScriptedProvider
) -> None:
    before = security.world.balances()
    calls = len(security.world.invocations())
    sent = sum(provider.executions.values())
    raw = b'{"n": "' + b"x" * 70_000 + b'"}'
    response = _invoke(security, raw, "too-big")
    assert response.status_code == 413, response.text[:300]  # type: ignore[attr-defined]
    assert response.json()["code"] == "REQUEST_TOO_LARGE"  # type: ignore[attr-defined]
    assert security.world.balances() == before
    assert len(security.world.invocations()) == calls
    quota = security.client.get("/v1/rate-limit", headers=security.owner.key_headers()).json()
    assert quota["accepted"] == 2  # the two seeded calls only
    assert sum(provider.executions.values()) == sent


def test_non_invoke_bodies_are_capped(security: SecurityWorld) -> None:
    huge = b'{"name": "' + b"k" * (MAX_BODY_BYTES + 10) + b'"}'
    declared = security.client.post(
        "/v1/api-keys", content=huge, headers=security.owner.session_headers()
    )
    assert declared.status_code == 413
    assert declared.headers["content-type"].startswith("application/problem+json")
    assert declared.json()["code"] == "REQUEST_TOO_LARGE"
    document = security.client.get("/v1/openapi.json").json()
    for path, operations in document["paths"].items():
        for operation in operations.values():  # body-taking operations document the cap
            if "requestBody" in operation:
                assert "413" in operation["responses"], path

    def chunks() -> Iterator[bytes]:  # no Content-Length: the stream is cut at the cap
        yield b'{"name": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"k" * 65536
        yield b'"}'

    streamed = security.client.post(
        "/v1/api-keys", content=chunks(), headers=security.owner.session_headers()
    )
    assert streamed.status_code == 413, streamed.text[:300]
    assert streamed.json()["code"] == "REQUEST_TOO_LARGE"
    page = security.client.post("/login", content=huge, follow_redirects=False)
    assert page.status_code == 413
    listed = security.client.get("/v1/api-keys", headers=security.owner.session_headers())
    assert len(listed.json()["items"]) == 3  # the seeded keys; nothing was created


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 500, 990, 30_000])
def test_deep_json_is_a_problem_not_a_crash(
    security: SecurityWorld, provider: ScriptedProvider, depth: int
) -> None:
    """Regression: a 500-deep payload was accepted, reserved and dispatched, then the flow
    crashed with RecursionError (500) reading the echoed result."""
    before = security.world.balances()
    deep_object = b'{"a":' * depth + b"1" + b"}" * depth
    deep_array = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    for i, raw in enumerate((deep_object, deep_array)):
        response = _invoke(security, raw, f"deep-{depth}-{i}")
        status = response.status_code  # type: ignore[attr-defined]
        assert status in (413, 422), response.text[:300]  # type: ignore[attr-defined]
        assert response.headers["content-type"].startswith(  # type: ignore[attr-defined]
            "application/problem+json"
        )
    assert security.world.balances() == before
    for path in ("/v1/api-keys", "/v1/auth/login"):
        answer = security.client.post(
            path,
            content=b"[" * 100_000 + b"]" * 100_000,
            headers={**security.owner.session_headers(), "Content-Type": "application/json"},
        )
        assert answer.status_code == 400, answer.text[:300]
        assert answer.headers["content-type"].startswith("application/problem+json")


def test_nesting_scan() -> None:
    assert not nesting_exceeds(b'{"a": [1, {"b": "[[[[[["}]}', 3)
    assert nesting_exceeds(b"[[[[]]]]", 3)
    assert not nesting_exceeds(b'"\\"[[[[[["', 1)
    assert nesting_exceeds(b"[" * 100_000, MAX_JSON_DEPTH)
