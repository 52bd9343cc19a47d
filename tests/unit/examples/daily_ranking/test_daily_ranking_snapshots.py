"""The snapshot store: complete snapshots only, and immutable once stored."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import sqlalchemy as sa

from mercato_examples.daily_ranking.snapshots import SnapshotEntry, SnapshotExists, SnapshotStore

NOW = dt.datetime(2026, 5, 20, 3, 0, tzinfo=dt.UTC)
ENTRY = SnapshotEntry(1, "t", "a", "https://www.pixiv.net/artworks/1", "0" * 64, "image/png", 9)


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(f"sqlite:///{tmp_path / 'snapshots.db'}")


def test_a_snapshot_round_trips(store: SnapshotStore) -> None:
    stored = store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[ENTRY])

    assert store.get("manga-20260519") == stored
    assert store.latest("manga") == stored
    assert store.latest("illust") is None


def test_the_newest_ranking_day_is_the_latest(store: SnapshotStore) -> None:
    store.commit(chart="manga", chart_date="20260520", fetched_at=NOW, entries=[ENTRY])
    store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[ENTRY])

    latest = store.latest("manga")

    assert latest is not None and latest.id == "manga-20260520"
    assert store.latest_date("manga") == "20260520"


def test_an_empty_snapshot_is_never_stored(store: SnapshotStore) -> None:
    with pytest.raises(ValueError, match="empty"):
        store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[])
    assert store.list_ids() == []


def test_a_second_snapshot_of_the_same_day_is_refused(store: SnapshotStore) -> None:
    store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[ENTRY])
    with pytest.raises(SnapshotExists):
        store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[ENTRY, ENTRY])


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE daily_ranking_snapshots SET entries = '[]'",
        "DELETE FROM daily_ranking_snapshots",
    ],
)
def test_the_database_refuses_to_change_a_stored_snapshot(
    store: SnapshotStore, tmp_path: Path, statement: str
) -> None:
    store.commit(chart="manga", chart_date="20260519", fetched_at=NOW, entries=[ENTRY])
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'snapshots.db'}")

    with pytest.raises(sa.exc.DatabaseError, match="immutable"), engine.begin() as conn:
        conn.execute(sa.text(statement))

    engine.dispose()
    stored = store.get("manga-20260519")
    assert stored is not None and stored.entries == (ENTRY,)
