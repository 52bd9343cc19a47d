"""The business handler: answer a payload from the stored snapshots, never from the upstream."""

from __future__ import annotations

import json
from typing import Any

from mercato.provider import Artifact, DefinedFailure, Success
from mercato_examples.daily_ranking.config import CHARTS
from mercato_examples.daily_ranking.parsing import iso_date
from mercato_examples.daily_ranking.snapshots import Snapshot, SnapshotStore

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# The v1 contract's responseMaxBytes, less room for the envelope around the result.
RESPONSE_MAX_BYTES = 262144
RESULT_BUDGET_BYTES = RESPONSE_MAX_BYTES - 1024

INVALID_CHART = DefinedFailure("INVALID_CHART", 400)
INVALID_LIMIT = DefinedFailure("INVALID_LIMIT", 400)
UNKNOWN_SNAPSHOT = DefinedFailure("UNKNOWN_SNAPSHOT", 404)
NO_SNAPSHOT_YET = DefinedFailure("NO_SNAPSHOT_YET", 404)


def _limit(payload: dict[str, Any]) -> int | None:
    value = payload.get("limit")
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.0 is an integer to JSON Schema, so the contract allows it
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_LIMIT else None


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def render(snapshot: Snapshot, limit: int) -> Success:
    """Return the result for the first `limit` entries; a pure function of the snapshot.

    The cap is an upper bound: when the entries would not fit in the version's response limit,
    the answer stops at the last entry that fits (decision 0094), so it never becomes an
    oversized, unknown outcome on the platform.
    """
    result: dict[str, Any] = {
        "snapshotId": snapshot.id,
        "chart": snapshot.chart,
        "date": iso_date(snapshot.chart_date),
        "entries": [],
    }
    artifacts: list[Artifact] = []
    used = _size({**result, "artifacts": []})
    for e in snapshot.entries[:limit]:
        entry = {
            "rank": e.rank,
            "title": e.title,
            "author": e.author,
            "link": e.link,
            "thumbnailDigest": e.thumbnail_digest,
        }
        artifact = Artifact(f"thumb-{e.rank}", e.thumbnail_digest, e.media_type, e.size)
        cost = _size(entry) + _size(artifact.to_json()) + 2
        if used + cost > RESULT_BUDGET_BYTES:
            break
        used += cost
        result["entries"].append(entry)
        artifacts.append(artifact)
    return Success(result, artifacts)


class RankingHandler:
    """`handler(payload)` for create_provider_app: Success or a DefinedFailure (DESIGN §11)."""

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

    def __call__(self, payload: dict[str, Any]) -> Success | DefinedFailure:
        chart = payload.get("chart")
        if not isinstance(chart, str) or chart not in CHARTS:
            return INVALID_CHART
        limit = _limit(payload)
        if limit is None:
            return INVALID_LIMIT
        wanted = payload.get("snapshotId")
        if wanted is None:
            snapshot = self._store.latest(chart)
            if snapshot is None:
                return NO_SNAPSHOT_YET
        else:
            snapshot = self._store.get(wanted) if isinstance(wanted, str) else None
            if snapshot is None or snapshot.chart != chart:
                return UNKNOWN_SNAPSHOT
        return render(snapshot, limit)
