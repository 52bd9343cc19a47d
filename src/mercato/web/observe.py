"""Request context at the edge: a request id per HTTP request, one log line, counters.

`RequestLog` is called by the edge layer (web/front.py) and never reads a response body: the
labels come from the result objects, noted on the request's state (`scope["state"]`) by
whoever holds them — every problem response notes its `code` as it is sent
(web/problems.py), the invoke route the call's outcome and settlement from its InvocationView
(`note_invoke_outcome`). The request id is the incoming `X-Request-Id` when it is a sane
token, else a new one; it is echoed in the response header and set in
`mercato.core.logs.request_id_var`, so every log line written while serving the request — the
provider call's included, across the threadpool — has it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from prometheus_client import Counter, Histogram
from starlette.types import Scope

from mercato.core.ids import SYSTEM_IDS, Ids
from mercato.core.logs import log_fields, sane_request_id
from mercato.core.metrics import HTTP_REQUESTS, INVOKE_LATENCY, INVOKES, QUOTA_REJECTIONS
from mercato.invocations.schemas import InvocationView
from mercato.web.problems import PROBLEM_CODE

log = logging.getLogger("mercato.http")

REQUEST_ID_HEADER = "X-Request-Id"
INVOKE_ROUTE = "/v1/services/{service_code}/versions/{version}:invoke"
_QUOTA_CODE = "RATE_LIMIT_EXCEEDED"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_OUTCOME = "invoke_outcome"  # request.state: (outcome, settlement) noted by the invoke route
REJECTED = ("rejected", "NONE")


def invoke_outcome(view: InvocationView) -> tuple[str, str]:
    """(outcome, settlement) of an invocation the invoke route answers with, for
    `mercato_invokes_total`: what the call became, not how the answer looks."""
    if view.pending:
        return "pending", "PENDING"
    if view.state == "SUCCEEDED":
        return "succeeded", "SETTLED"
    return "failed", "RELEASED"


def note_invoke_outcome(request: Request, view: InvocationView) -> None:
    """Record the outcome of the call the invoke route is answering with; an invoke answered
    without one (refused before or instead of a call) counts as rejected."""
    request.scope.setdefault("state", {})[_OUTCOME] = invoke_outcome(view)  # = request.state


def _header(scope: Scope, name: bytes) -> str | None:
    size = len(name)
    for key, value in scope.get("headers", ()):
        if len(key) == size and key.lower() == name:  # only a name of its length can match
            return str(value.decode("latin-1"))
    return None


class RequestLog:
    """Request ids, the request log line, the HTTP and invoke counters (see the module
    docstring); the edge layer (web/front.py) calls it for every HTTP request."""

    def __init__(self, ids: Ids = SYSTEM_IDS) -> None:
        self.ids = ids
        # The labelled series each request counts in, looked up once per label values (they
        # are bounded: methods, route templates, statuses and outcomes are finite sets).
        self._requests: dict[tuple[str, str, int], Counter] = {}
        self._invokes: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def request_id(self, scope: Scope) -> str:
        """The incoming `X-Request-Id` when it is a sane token, else a new id."""
        return sane_request_id(_header(scope, b"x-request-id")) or self.ids.new("req")

    def record(self, scope: Scope, status: int, started: float) -> None:
        """Count the answered request and write its log line (`started`: perf_counter)."""
        elapsed = time.perf_counter() - started
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope.get("method", "")
        if method not in _METHODS:
            method = "OTHER"  # bounded label values
        count = self._requests.get((method, route, status))
        if count is None:
            count = HTTP_REQUESTS.labels(method, route, str(status))
            self._requests[method, route, status] = count
        count.inc()
        state = scope.get("state", {})
        code = state.get(PROBLEM_CODE) if status >= 400 else None
        fields: dict[str, Any] = {
            "method": method,
            "path": scope.get("path", ""),
            "route": route,
            "status": status,
            "duration_ms": round(elapsed * 1000, 1),
            # The client address every other part sees: the peer's, or the forwarded one
            # from a trusted proxy only (decision 0221; rewritten by the outermost layer).
            "client": client_address(scope),
        }
        principal = state.get("principal")
        if principal is not None:
            fields["account_id"] = getattr(principal, "account_id", None)
        invocation_id = state.get("invocation_id")
        if invocation_id is not None:
            fields["invocation_id"] = invocation_id  # joins the worker's lines (decision 0274)
        if code is not None:
            fields["problem_code"] = code
        if route == INVOKE_ROUTE:
            outcome, settlement = state.get(_OUTCOME, REJECTED)
            invokes = self._invokes.get((outcome, settlement))
            if invokes is None:
                invokes = (INVOKES.labels(outcome, settlement), INVOKE_LATENCY.labels(outcome))
                self._invokes[outcome, settlement] = invokes
            invokes[0].inc()
            invokes[1].observe(elapsed)
            if code == _QUOTA_CODE:
                QUOTA_REJECTIONS.inc()
            fields["outcome"] = outcome
        log_fields(log, logging.INFO, "request", fields)


def client_address(scope: Scope) -> str | None:
    """The request's client address after the trusted-proxy rule (None when unknown)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def install(app: FastAPI) -> None:
    """Add `/metrics` (the request context is part of the edge layer, web/front.py)."""
    from mercato.web import metrics

    app.include_router(metrics.router)
