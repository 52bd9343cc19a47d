"""Request context at the edge: a request id per HTTP request, one log line, counters.

`RequestContext` is a plain ASGI middleware (no buffering of bodies other than small problem
documents of the invoke route, whose `code` tells a quota rejection from a provider failure).
The request id is the incoming `X-Request-Id` when it is a sane token, else a new one; it is
echoed in the response header and set in `mercato.core.logs.request_id_var`, so every log line
written while serving the request — the provider call's included, across the threadpool — has
it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mercato.core.ids import SYSTEM_IDS, Ids
from mercato.core.logs import request_id_var, sane_request_id
from mercato.core.metrics import HTTP_REQUESTS, INVOKE_LATENCY, INVOKES, QUOTA_REJECTIONS

log = logging.getLogger("mercato.http")

REQUEST_ID_HEADER = "X-Request-Id"
INVOKE_ROUTE = "/v1/services/{service_code}/versions/{version}:invoke"
_PROBLEM_CAPTURE_LIMIT = 64 * 1024
_PROVIDER_FAILURES = frozenset(
    {"PROVIDER_DEFINED_FAILURE", "PROVIDER_CONTRACT_VIOLATION", "PROVIDER_UNAVAILABLE"}
)
_QUOTA_CODE = "RATE_LIMIT_EXCEEDED"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def invoke_outcome(status: int, problem_code: str | None) -> tuple[str, str]:
    """(outcome, settlement) of one invoke answer, for `mercato_invokes_total`."""
    if status == 200:
        return "succeeded", "SETTLED"
    if status == 202:
        return "pending", "PENDING"
    if problem_code in _PROVIDER_FAILURES:
        return "failed", "RELEASED"
    return "rejected", "NONE"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


class RequestContext:
    """Request id, request log line, HTTP and invoke counters; see the module docstring."""

    def __init__(self, app: ASGIApp, ids: Ids = SYSTEM_IDS) -> None:
        self.app = app
        self.ids = ids

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = sane_request_id(_header(scope, b"x-request-id")) or self.ids.new("req")
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        answer: dict[str, Any] = {"status": 500, "problem": None}
        captured = bytearray()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                headers = MutableHeaders(scope=message)
                headers[REQUEST_ID_HEADER] = request_id
                content_type = headers.get("content-type", "")
                answer["problem"] = content_type.startswith("application/problem+json")
            elif (
                message["type"] == "http.response.body"
                and answer["problem"] is True
                and len(captured) < _PROBLEM_CAPTURE_LIMIT
            ):
                captured.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            # Rendered as a 500 problem by the outermost middleware; keep the id for its log.
            self._record(scope, 500, None, started)
            raise
        self._record(scope, answer["status"], captured if answer["problem"] else None, started)
        request_id_var.reset(token)

    def _record(self, scope: Scope, status: int, problem: bytearray | None, started: float) -> None:
        elapsed = time.perf_counter() - started
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope.get("method", "")
        if method not in _METHODS:
            method = "OTHER"  # bounded label values
        HTTP_REQUESTS.labels(method, route, str(status)).inc()
        code = _problem_code(problem) if problem else None
        fields: dict[str, Any] = {
            "method": method,
            "path": scope.get("path", ""),
            "route": route,
            "status": status,
            "duration_ms": round(elapsed * 1000, 1),
        }
        principal = scope.get("state", {}).get("principal")
        if principal is not None:
            fields["account_id"] = getattr(principal, "account_id", None)
        if code is not None:
            fields["problem_code"] = code
        if route == INVOKE_ROUTE:
            outcome, settlement = invoke_outcome(status, code)
            INVOKES.labels(outcome, settlement).inc()
            INVOKE_LATENCY.labels(outcome).observe(elapsed)
            if code == _QUOTA_CODE:
                QUOTA_REJECTIONS.inc()
            fields["outcome"] = outcome
        log.info("request", extra=fields)


def _problem_code(body: bytearray) -> str | None:
    try:
        document = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        return None
    code = document.get("code") if isinstance(document, dict) else None
    return code if isinstance(code, str) else None


def install(app: FastAPI) -> None:
    """Add the request context middleware, `/metrics`, the OpenAPI document and docs."""
    from mercato.web import metrics, openapi

    app.add_middleware(RequestContext, ids=app.state.runtime.ids)
    app.include_router(metrics.router)
    openapi.install(app)
