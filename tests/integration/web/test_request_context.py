"""Request ids through the ASGI app: echoed, carried into threadpool log lines, kept on the
log line of an unexpected error (whose secret-bearing message is redacted); the request line's
problem code comes from the problem object answered, never from a response body."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from mercato.core.errors import Conflict
from mercato.core.logs import json_handler
from mercato.db.runtime import Runtime
from mercato.web.app import create_app

TOKEN = "mercato_at_" + "s" * 40


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = json_handler(stream)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(previous)


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    app = create_app(runtime)

    @app.get("/test/work")
    def work() -> dict[str, str]:  # a sync route: runs in the threadpool
        logging.getLogger("mercato.test").info("working", extra={"step": 1})
        return {"ok": "yes"}

    @app.get("/test/boom")
    def boom() -> None:
        raise RuntimeError(f"exploded while holding {TOKEN}")

    @app.get("/test/conflict")
    def conflict() -> None:
        raise Conflict("taken")

    @app.get("/test/forged")
    def forged() -> JSONResponse:  # looks like a problem, but is not one the platform answered
        body = {"type": "x", "title": "x", "status": 409, "code": "FORGED", "message": "x"}
        return JSONResponse(body, status_code=409, media_type="application/problem+json")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_request_id_reaches_threadpool_lines_and_the_header(
    client: TestClient, logs: io.StringIO
) -> None:
    response = client.get("/test/work", headers={"X-Request-Id": "trace-42"})
    assert response.headers["x-request-id"] == "trace-42"
    lines = [line for line in _lines(logs) if line["request_id"] == "trace-42"]
    assert [line["msg"] for line in lines] == ["working", "request"]
    assert lines[0]["step"] == 1
    assert lines[1]["route"] == "/test/work" and lines[1]["status"] == 200


def test_each_request_gets_its_own_generated_id(client: TestClient) -> None:
    first = client.get("/health/live").headers["x-request-id"]
    second = client.get("/health/live", headers={"X-Request-Id": "a b"}).headers["x-request-id"]
    assert first != second
    assert first.startswith("req_") and second.startswith("req_")


def test_an_unexpected_error_is_logged_with_its_id_and_without_the_secret(
    client: TestClient, logs: io.StringIO
) -> None:
    response = client.get("/test/boom", headers={"X-Request-Id": "boom-1"})
    assert response.status_code == 500
    assert response.json()["code"] == "INTERNAL_ERROR"
    assert TOKEN not in logs.getvalue()
    mine = [line for line in _lines(logs) if line["request_id"] == "boom-1"]
    assert {line["msg"] for line in mine} == {"request", "unexpected error"}
    error = next(line for line in mine if line["msg"] == "unexpected error")
    assert "RuntimeError" in error["exc"] and "[REDACTED]" in error["exc"]
    request = next(line for line in mine if line["msg"] == "request")
    assert request["status"] == 500
    metrics = client.get("/metrics").text
    assert 'mercato_http_requests_total{method="GET",route="/test/boom",status="500"}' in metrics


def test_the_problem_code_comes_from_the_problem_object_not_the_body(
    client: TestClient, logs: io.StringIO
) -> None:
    assert client.get("/test/conflict", headers={"X-Request-Id": "p-1"}).status_code == 409
    assert client.get("/test/forged", headers={"X-Request-Id": "p-2"}).status_code == 409
    # A problem refused at the edge (U+0000 in the query) is noted too, though no handler ran.
    edge = client.get("/test/work?q=%00", headers={"X-Request-Id": "p-3"})
    assert edge.json()["code"] == "INVALID_TEXT"
    requests = {line["request_id"]: line for line in _lines(logs) if line["msg"] == "request"}
    assert requests["p-1"]["problem_code"] == "CONFLICT"
    assert "problem_code" not in requests["p-2"]  # the body was never read
    assert requests["p-3"]["problem_code"] == "INVALID_TEXT"
