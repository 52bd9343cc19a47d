"""The snapshot store: one immutable row per (chart, ranking day), committed atomically.

A separate SQLite file under the data dir (not the platform's database), so `refresh` in one
process is served by `serve` in another at once. Triggers refuse UPDATE and DELETE: a stored
snapshot never changes, which is what makes results on one snapshot byte-identical.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError

_metadata = MetaData()

snapshots = Table(
    "daily_ranking_snapshots",
    _metadata,
    Column("id", String(40), primary_key=True),
    Column("chart", String(16), nullable=False),
    Column("chart_date", String(8), nullable=False),
    Column("fetched_at", DateTime(timezone=True), nullable=False),
    Column("entry_count", Integer, nullable=False),
    Column("entries", Text, nullable=False),
    UniqueConstraint("chart", "chart_date", name="uq_daily_ranking_snapshots_chart_date"),
)

_IMMUTABLE = [
    "CREATE TRIGGER IF NOT EXISTS daily_ranking_snapshots_no_update BEFORE UPDATE ON "
    "daily_ranking_snapshots BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END",
    "CREATE TRIGGER IF NOT EXISTS daily_ranking_snapshots_no_delete BEFORE DELETE ON "
    "daily_ranking_snapshots BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END",
]


class SnapshotExists(Exception):
    """A snapshot of this chart and day is already stored (perhaps by another process)."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    rank: int
    title: str
    author: str
    link: str
    thumbnail_digest: str
    media_type: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "title": self.title,
            "author": self.author,
            "link": self.link,
            "thumbnailDigest": self.thumbnail_digest,
            "mediaType": self.media_type,
            "size": self.size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotEntry:
        return cls(
            rank=data["rank"],
            title=data["title"],
            author=data["author"],
            link=data["link"],
            thumbnail_digest=data["thumbnailDigest"],
            media_type=data["mediaType"],
            size=data["size"],
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    id: str
    chart: str
    chart_date: str
    fetched_at: dt.datetime
    entries: tuple[SnapshotEntry, ...]


def snapshot_id(chart: str, chart_date: str) -> str:
    """The id of a chart's snapshot for one ranking day: stable and readable."""
    return f"{chart}-{chart_date}"


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    return engine


class SnapshotStore:
    """Reads and commits snapshots; safe to share between threads and processes."""

    def __init__(self, url: str) -> None:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self._engine = _sqlite_engine(url)
        with self._engine.begin() as conn:
            _metadata.create_all(conn)
            for statement in _IMMUTABLE:
                conn.execute(text(statement))

    def close(self) -> None:
        self._engine.dispose()

    def check(self) -> None:
        """Raise when the store cannot be read."""
        with self._engine.connect() as conn:
            conn.execute(select(func.count()).select_from(snapshots))

    def commit(
        self,
        *,
        chart: str,
        chart_date: str,
        fetched_at: dt.datetime,
        entries: list[SnapshotEntry],
    ) -> Snapshot:
        """Store a complete snapshot in one transaction; refuses an empty one."""
        if not entries:
            raise ValueError("an empty snapshot is never stored")
        ident = snapshot_id(chart, chart_date)
        row = {
            "id": ident,
            "chart": chart,
            "chart_date": chart_date,
            "fetched_at": fetched_at,
            "entry_count": len(entries),
            "entries": json.dumps([e.to_json() for e in entries], ensure_ascii=False),
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(snapshots).values(**row))
        except IntegrityError as exc:
            raise SnapshotExists(ident) from exc
        return Snapshot(ident, chart, chart_date, fetched_at, tuple(entries))

    def get(self, ident: str) -> Snapshot | None:
        return self._one(select(snapshots).where(snapshots.c.id == ident))

    def latest(self, chart: str) -> Snapshot | None:
        """The snapshot of the newest ranking day stored for `chart`."""
        query = (
            select(snapshots)
            .where(snapshots.c.chart == chart)
            .order_by(snapshots.c.chart_date.desc())
            .limit(1)
        )
        return self._one(query)

    def latest_date(self, chart: str) -> str | None:
        query = select(func.max(snapshots.c.chart_date)).where(snapshots.c.chart == chart)
        with self._engine.connect() as conn:
            value = conn.execute(query).scalar()
        return str(value) if value is not None else None

    def list_ids(self, chart: str | None = None) -> list[str]:
        query = select(snapshots.c.id).order_by(snapshots.c.chart, snapshots.c.chart_date)
        if chart is not None:
            query = query.where(snapshots.c.chart == chart)
        with self._engine.connect() as conn:
            return [str(v) for v in conn.execute(query).scalars()]

    def _one(self, query: Any) -> Snapshot | None:
        with self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        fetched_at = row["fetched_at"]
        if fetched_at.tzinfo is None:
            fetched_at = fetched_at.replace(tzinfo=dt.UTC)
        return Snapshot(
            id=row["id"],
            chart=row["chart"],
            chart_date=row["chart_date"],
            fetched_at=fetched_at,
            entries=tuple(SnapshotEntry.from_json(e) for e in json.loads(row["entries"])),
        )
