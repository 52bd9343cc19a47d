"""Prometheus series recorded by this process (counters and histograms only: cheap on the hot
path). Gauges that describe the database (backlog, oldest pending, reserved points) are not
here: `mercato.web.metrics` computes them at scrape time.

Multi-process: when `PROMETHEUS_MULTIPROC_DIR` is set before this module is first imported
(`mercato serve --workers N` does that), prometheus_client writes the values to files there and
`/metrics` aggregates every worker process's files (decision 0151).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

INVOKES = Counter(
    "mercato_invokes",
    "Invoke requests answered, by outcome (succeeded, failed, pending, rejected) and "
    "settlement (SETTLED, RELEASED, PENDING, NONE for a rejection that reserved nothing).",
    ["outcome", "settlement"],
)
INVOKE_LATENCY = Histogram(
    "mercato_invoke_duration_seconds",
    "Wall time of invoke requests, from the first byte in to the answer, by outcome.",
    ["outcome"],
    buckets=_LATENCY_BUCKETS,
)
PROVIDER_CALL_LATENCY = Histogram(
    "mercato_provider_call_duration_seconds",
    "Wall time of calls to provider endpoints, by operation and result (HTTP status class or "
    "transport error).",
    ["operation", "result"],
    buckets=_LATENCY_BUCKETS,
)
QUOTA_REJECTIONS = Counter(
    "mercato_quota_rejections",
    "Invoke requests refused with 429 QUOTA_EXCEEDED (they reserved nothing).",
)
HTTP_REQUESTS = Counter(
    "mercato_http_requests",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
