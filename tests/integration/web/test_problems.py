"""Every error, including framework ones, is an RFC 9457 problem document."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_unknown_route_is_a_problem(client: TestClient) -> None:
    response = client.get("/v1/nope")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == 404
    assert body["code"] == "NOT_FOUND"
    assert {"type", "title", "message"} <= set(body)


def test_wrong_method_is_a_problem(client: TestClient) -> None:
    response = client.delete("/health/live")
    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"


def test_health_endpoints(client: TestClient) -> None:
    assert client.get("/health/live").json() == {"status": "ok"}
    assert client.get("/health/ready").json() == {"status": "ok"}
