"""Refresh: fetch a chart page by page (date pinned from page 1), cache thumbnails, commit once.

Any failure on the way leaves the store untouched, so the last good snapshot keeps answering
and an empty or partial snapshot is never written (spec 1.7).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from mercato.provider import BlobStore
from mercato_examples.daily_ranking.parsing import (
    RankedWork,
    RankingPage,
    UpstreamFormatError,
    artwork_link,
)
from mercato_examples.daily_ranking.snapshots import SnapshotEntry, SnapshotExists, SnapshotStore
from mercato_examples.daily_ranking.upstream import UpstreamClient, UpstreamError

log = logging.getLogger("mercato_examples.daily_ranking")

MAX_ENTRIES = 500
MAX_PAGES = 10


class RefreshFailed(Exception):
    """The chart could not be fetched completely and consistently."""


@dataclass(frozen=True, slots=True)
class RefreshReport:
    """What one refresh of one chart did; `snapshot_id` is the one now serving (or None)."""

    chart: str
    status: Literal["created", "unchanged", "failed"]
    snapshot_id: str | None
    chart_date: str | None
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def _collect_pages(client: UpstreamClient, chart: str, first: RankingPage) -> list[RankedWork]:
    works = list(first.works)
    page = first
    while page.next_page and len(works) < MAX_ENTRIES and page.page < MAX_PAGES:
        following = client.fetch_page(chart, page.page + 1, chart_date=first.chart_date)
        if following is None:
            break
        if following.chart_date != first.chart_date:
            raise RefreshFailed(
                f"new chart mid-fetch: page {following.page} is dated {following.chart_date}, "
                f"page 1 was {first.chart_date}"
            )
        works.extend(following.works)
        page = following
    expected = min(first.rank_total or 0, MAX_ENTRIES)
    if len(works) < expected:
        raise RefreshFailed(f"chart truncated: {len(works)} of {expected} entries arrived")
    return works[:MAX_ENTRIES]


def _check_order(works: list[RankedWork]) -> None:
    if not works:
        raise RefreshFailed("the chart has no entries")
    if works[0].rank != 1:
        raise RefreshFailed(f"the chart starts at rank {works[0].rank}, not 1")
    for before, after in itertools.pairwise(works):
        if after.rank <= before.rank:
            raise RefreshFailed(f"ranks are not increasing at rank {after.rank}")
    if len({w.illust_id for w in works}) != len(works):
        raise RefreshFailed("the chart lists a work twice")


def _entries(
    client: UpstreamClient, blobs: BlobStore, works: list[RankedWork]
) -> list[SnapshotEntry]:
    entries = []
    for work in works:
        if work.sexual != 0:
            # mode=daily is all-ages; an R-18 work here means the upstream changed. Drop it.
            log.warning("dropping rank %s: marked sexual=%s", work.rank, work.sexual)
            continue
        thumbnail = client.fetch_thumbnail(work.thumbnail_url)
        digest = blobs.put(thumbnail.data)
        entries.append(
            SnapshotEntry(
                rank=work.rank,
                title=work.title,
                author=work.author,
                link=artwork_link(work.illust_id),
                thumbnail_digest=digest,
                media_type=thumbnail.media_type,
                size=len(thumbnail.data),
            )
        )
    return entries


def refresh_chart(
    *,
    chart: str,
    client: UpstreamClient,
    store: SnapshotStore,
    blobs: BlobStore,
    now: Callable[[], dt.datetime],
) -> RefreshReport:
    """Fetch `chart`; store a new snapshot when the upstream has a newer, complete one."""
    kept_date = store.latest_date(chart)
    kept = store.latest(chart) if kept_date else None
    kept_id = kept.id if kept else None
    try:
        first = client.fetch_page(chart, 1, chart_date=None)
        if first is None:
            raise RefreshFailed("page 1 answered 404")
        if kept_date is not None and first.chart_date <= kept_date:
            return RefreshReport(chart, "unchanged", kept_id, kept_date, "no newer chart yet")
        works = _collect_pages(client, chart, first)
        _check_order(works)
        entries = _entries(client, blobs, works)
        if not entries:
            raise RefreshFailed("no entry left to store")
        snapshot = store.commit(
            chart=chart, chart_date=first.chart_date, fetched_at=now(), entries=entries
        )
    except SnapshotExists:
        latest = store.latest(chart)
        return RefreshReport(
            chart,
            "unchanged",
            latest.id if latest else None,
            latest.chart_date if latest else None,
            "stored by another refresh",
        )
    except (RefreshFailed, UpstreamError, UpstreamFormatError, OSError) as exc:
        log.warning("refresh of %s failed, keeping %s: %s", chart, kept_id or "nothing", exc)
        return RefreshReport(chart, "failed", kept_id, kept_date, str(exc))
    log.info("refresh of %s stored %s (%d entries)", chart, snapshot.id, len(entries))
    return RefreshReport(chart, "created", snapshot.id, snapshot.chart_date)


class ScheduledRefresher:
    """Runs `refresh_all` at start and then every `interval` seconds on a daemon thread."""

    def __init__(self, refresh_all: Callable[[], Iterable[RefreshReport]], interval: float) -> None:
        self._refresh_all = refresh_all
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="daily-ranking-refresh", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                list(self._refresh_all())
            except Exception:
                log.exception("scheduled refresh crashed; trying again next round")
            self.rounds += 1
            self._stop.wait(self._interval)
