"""The request log's counts (decision 0498): its calls add what prometheus_client's own `inc` and
`observe` add, to the same series, exactly once per request."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from mercato.core.metrics import HTTP_REQUESTS, INVOKE_LATENCY, INVOKES
from mercato.web.observe import INVOKE_ROUTE, RequestLog, _adder, _observer

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[Any, ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for metric in registry.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    }


def _pair(kind: type[Any], **options: Any) -> tuple[Any, Any, CollectorRegistry, CollectorRegistry]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = kind("m", "m", ["outcome"], registry=ours, **options).labels("succeeded")
    b = kind("m", "m", ["outcome"], registry=theirs, **options).labels("succeeded")
    return a, b, ours, theirs


@given(st.integers(min_value=0, max_value=50))
def test_a_counters_adder_adds_what_inc_adds(times: int) -> None:
    a, b, ours, theirs = _pair(Counter)
    add = _adder(a)
    for _ in range(times):
        add()
        b.inc()
    assert _samples(ours) == _samples(theirs)
    assert a._value.get() == times


_amounts = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([*_BUCKETS, 0.0, -0.0, -1.0, math.inf, -math.inf, math.nan]),
    st.integers(min_value=-5, max_value=100),
)


@given(st.lists(_amounts, max_size=30))
def test_a_histograms_observer_adds_what_observe_adds(amounts: list[float]) -> None:
    a, b, ours, theirs = _pair(Histogram, buckets=_BUCKETS)
    observe = _observer(a)
    for amount in amounts:
        observe(amount)
        b.observe(amount)
    mine, reference = _samples(ours), _samples(theirs)
    assert mine.keys() == reference.keys()
    for key, value in reference.items():
        assert mine[key] == value or (math.isnan(value) and math.isnan(mine[key]))


def test_anything_but_prometheus_clients_own_classes_keeps_its_methods() -> None:
    class Mine(Counter):
        pass

    class MyHistogram(Histogram):
        pass

    registry = CollectorRegistry()
    counter = Mine("c", "c", ["x"], registry=registry).labels("1")
    histogram = MyHistogram("h", "h", ["x"], registry=registry).labels("1")
    assert _adder(counter) == counter.inc
    assert _observer(histogram) == histogram.observe


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
