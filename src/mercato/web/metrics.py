"""`GET /metrics`: Prometheus text format.

Counters and histograms come from this process (or, under `serve --workers N`, from every worker
process through prometheus_client's multiprocess files). The database gauges are computed at
scrape time, once per scrape, so they agree across processes and need no bookkeeping on the hot
path: reconciliation backlog by state, stuck calls, age of the oldest unfinished invocation, and
the points held in reservations.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import text
from starlette.responses import Response

from mercato.db.runtime import Runtime
from mercato.web.deps import runtime_of

router = APIRouter(include_in_schema=False)

# The calls that are not terminal, through the worker's queue (decision 0602).
_BACKLOG = text(
    "SELECT i.state, COUNT(*) FROM invocation_dues d JOIN invocations i "
    "ON i.id = d.invocation_id WHERE i.state IN ('RECONCILING', 'RETRY_WAIT') GROUP BY i.state"
)
_OLDEST = text(
    "SELECT MIN(i.created_at) FROM invocation_dues d JOIN invocations i "
    "ON i.id = d.invocation_id WHERE i.state IN ('DISPATCHING', 'RETRY_WAIT', 'RECONCILING')"
)
_STUCK = text(
    "SELECT COUNT(*) FROM invocation_dues d JOIN invocations i ON i.id = d.invocation_id "
    "WHERE i.state IN ('DISPATCHING', 'RETRY_WAIT', 'RECONCILING') AND i.stuck_at IS NOT NULL"
)
_RESERVED = text("SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE state = 'HELD'")


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self._runtime
        with runtime.db.read() as session:
            backlog = {str(state): int(count) for state, count in session.execute(_BACKLOG)}
            oldest = session.execute(_OLDEST).scalar()
            stuck = int(session.execute(_STUCK).scalar() or 0)
            reserved = int(session.execute(_RESERVED).scalar() or 0)
        by_state = GaugeMetricFamily(
            "mercato_reconciliation_backlog",
            "Invocations waiting for the worker: RECONCILING (outcome unknown) and RETRY_WAIT "
            "(to be sent again).",
            labels=["state"],
        )
        for state in ("RECONCILING", "RETRY_WAIT"):
            by_state.add_metric([state], backlog.get(state, 0))
        yield by_state
        yield GaugeMetricFamily(
            "mercato_invocations_stuck",
            "Pending invocations marked stuck: their outcome stayed unknown past "
            "MERCATO_STUCK_AFTER_ATTEMPTS reconciliations or MERCATO_STUCK_AFTER_SECONDS; staff "
            "resolve them.",
            value=stuck,
        )
        age = 0.0
        if oldest is not None:
            if isinstance(oldest, str):  # SQLite without the column type's processing
                from datetime import datetime

                oldest = datetime.fromisoformat(oldest)
            if oldest.tzinfo is None:
                from datetime import UTC

                oldest = oldest.replace(tzinfo=UTC)
            age = max((runtime.clock.now() - oldest).total_seconds(), 0.0)
        yield GaugeMetricFamily(
            "mercato_oldest_pending_invocation_age_seconds",
            "Age of the oldest invocation not yet SUCCEEDED or FAILED (0 when there is none).",
            value=age,
        )
        yield GaugeMetricFamily(
            "mercato_reserved_points_outstanding",
            "Points held in reservations across all accounts (ledger reserved balances).",
            value=reserved,
        )


def render(runtime: Runtime) -> bytes:
    """The exposition text: this process's (or all workers') series, then the DB gauges."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(DatabaseCollector(runtime))
    if runtime.settings.prometheus_multiproc_dir:
        MultiProcessCollector(scrape)  # type: ignore[no-untyped-call]
        return generate_latest(scrape)
    return generate_latest(REGISTRY) + generate_latest(scrape)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    return Response(render(runtime_of(request)), media_type=CONTENT_TYPE_LATEST)
