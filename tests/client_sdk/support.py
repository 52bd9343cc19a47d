"""Scripted httpx.MockTransport answers for the client's unit tests: in order, all recorded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx

Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def problem(
    status: int, code: str, headers: dict[str, str] | None = None, **extra: Any
) -> httpx.Response:
    body = {
        "type": "about:blank",
        "title": code,
        "status": status,
        "code": code,
        "message": f"{code} happened",
        **extra,
    }
    return httpx.Response(
        status, json=body, headers={"Content-Type": "application/problem+json", **(headers or {})}
    )


def settled(
    invocation_id: str = "inv_1",
    result: dict[str, Any] | None = None,
    artifacts: list[dict[str, Any]] | None = None,
) -> httpx.Response:
    body: dict[str, Any] = {"invocationId": invocation_id, "result": result or {"ok": True}}
    if artifacts is not None:
        body["artifacts"] = artifacts
    return httpx.Response(200, json=body)


def pending(invocation_id: str = "inv_1") -> httpx.Response:
    return httpx.Response(
        202,
        json={
            "invocationId": invocation_id,
            "status": "PENDING",
            "settlement": "PENDING",
            "receipt": f"/v1/invocations/{invocation_id}",
        },
        headers={"Location": f"/v1/invocations/{invocation_id}"},
    )


def receipt(
    invocation_id: str = "inv_1",
    *,
    status: str = "PENDING",
    key: str = "k",
    artifacts: list[dict[str, Any]] | None = None,
) -> httpx.Response:
    settlement = {"PENDING": "PENDING", "SUCCEEDED": "SETTLED", "FAILED": "RELEASED"}[status]
    return httpx.Response(
        200,
        json={
            "invocationId": invocation_id,
            "serviceCode": "acme.echo",
            "version": "v1",
            "contractDigest": "c" * 64,
            "status": status,
            "settlement": settlement,
            "listedPrice": 10,
            "actualSpend": None if status == "PENDING" else 10,
            "createdAt": "2026-01-01T00:00:00Z",
            "settledAt": None,
            "refundedAt": None,
            "errorCode": None,
            "artifacts": artifacts or [],
            "idempotencyKey": key,
            "channel": "API_KEY",
            "resolution": None,
        },
    )


class Script:
    """Answers requests from a list, in order, and keeps every request it saw."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        if not self.answers:
            raise AssertionError(f"unscripted request {request.method} {request.url}")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, httpx.Response):
            return answer(request)
        return answer

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def keys(self) -> list[str | None]:
        return [r.headers.get("Idempotency-Key") for r in self.requests if r.method == "POST"]

    def lines(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]


class Sleeps:
    """An injected sleep that records instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

    async def async_sleep(self, seconds: float) -> None:
        self.calls.append(seconds)


class FailingStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that breaks after its first chunk: a connection dropped mid-download."""

    def __init__(self, first: bytes) -> None:
        self.first = first

    def __iter__(self) -> Iterator[bytes]:
        yield self.first
        raise httpx.ReadError("connection dropped")

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield self.first
        raise httpx.ReadError("connection dropped")
