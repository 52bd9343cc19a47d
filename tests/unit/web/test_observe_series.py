"""The request log's counts: each request counts exactly once in each of its series."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from mercato.core.metrics import HTTP_REQUESTS, INVOKE_LATENCY, INVOKES
from mercato.web.observe import INVOKE_ROUTE, RequestLog


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class _Route:
    path = INVOKE_ROUTE


def test_n_requests_count_n_in_each_series() -> None:
    requests = RequestLog()
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/v1/services/s/versions/1:invoke",
        "route": _Route(),
        "client": ("127.0.0.1", 1),
        "state": {"invoke_outcome": ("succeeded", "SETTLED")},
    }
    http = {"method": "POST", "route": INVOKE_ROUTE, "status": "200"}
    invokes = {"outcome": "succeeded", "settlement": "SETTLED"}
    before = (
        _value("mercato_http_requests_total", http),
        _value("mercato_invokes_total", invokes),
        _value("mercato_invoke_duration_seconds_count", {"outcome": "succeeded"}),
        _value("mercato_invoke_duration_seconds_bucket", {"outcome": "succeeded", "le": "+Inf"}),
    )
    for _ in range(7):
        requests.record(scope, 200, 0.0)
    after = (
        _value("mercato_http_requests_total", http),
        _value("mercato_invokes_total", invokes),
        _value("mercato_invoke_duration_seconds_count", {"outcome": "succeeded"}),
        _value("mercato_invoke_duration_seconds_bucket", {"outcome": "succeeded", "le": "+Inf"}),
    )
    assert [b - a for a, b in zip(before, after, strict=True)] == [7, 7, 7, 7]
    # The children counted in are the metrics' own (the series /metrics exposes).
    assert HTTP_REQUESTS.labels("POST", INVOKE_ROUTE, "200")._value.get() == after[0]
    assert INVOKES.labels("succeeded", "SETTLED")._value.get() == after[1]
    assert INVOKE_LATENCY.labels("succeeded")._sum.get() > 0
