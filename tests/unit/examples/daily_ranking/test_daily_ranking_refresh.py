"""Refresh against the sample upstream over real HTTP: success, and every way it can fail."""

from __future__ import annotations

import hashlib
import threading

import pytest

from builders.daily_ranking import SMALL_SIZES, RecordingSleep, control
from mercato_examples.daily_ranking.config import CHARTS, DailyRankingSettings
from mercato_examples.daily_ranking.provider import DailyRanking
from mercato_examples.daily_ranking.refresh import RefreshReport, ScheduledRefresher
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream


def test_a_refresh_stores_every_chart_with_cached_thumbnails(provider: DailyRanking) -> None:
    reports = provider.refresh()

    assert [(r.chart, r.status) for r in reports] == [(c, "created") for c in CHARTS]
    for chart in CHARTS:
        snapshot = provider.snapshots.latest(chart)
        assert snapshot is not None
        assert snapshot.id == f"{chart}-20260519"
        assert [e.rank for e in snapshot.entries] == list(range(1, SMALL_SIZES[chart] + 1))
        for entry in snapshot.entries:
            data = provider.blobs.get(entry.thumbnail_digest)
            assert data is not None
            assert hashlib.sha256(data).hexdigest() == entry.thumbnail_digest
            assert (entry.media_type, entry.size) == ("image/png", len(data))
            assert entry.link.startswith("https://www.pixiv.net/artworks/")


def test_later_pages_are_pinned_to_page_one_date(provider: DailyRanking) -> None:
    provider.refresh(["overall"])
    snapshot = provider.snapshots.latest("overall")
    assert snapshot is not None
    # Three pages of 50, 50 and 20: all from one chart, ranks contiguous.
    assert len(snapshot.entries) == 120
    assert len({e.link for e in snapshot.entries}) == 120


def test_an_unchanged_chart_is_not_a_failure_and_stores_nothing(provider: DailyRanking) -> None:
    provider.refresh()
    again = provider.refresh()

    assert {r.status for r in again} == {"unchanged"}
    assert not any(r.failed for r in again)
    assert len(provider.snapshots.list_ids()) == 3


def test_a_new_chart_day_adds_a_snapshot_and_keeps_the_old_one(
    provider: DailyRanking, sample: SampleUpstream
) -> None:
    provider.refresh(["manga"])
    control(sample, advanceDays=1)

    [report] = provider.refresh(["manga"])

    assert (report.status, report.snapshot_id) == ("created", "manga-20260520")
    assert provider.snapshots.list_ids("manga") == ["manga-20260519", "manga-20260520"]


FAILURES = [
    ("http_500", "HTTP 500"),
    ("html", "not JSON"),
    ("missing_fields", "user_name"),
    ("thumbnail_404", "thumbnail answered HTTP 404"),
    ("thumbnail_not_image", "not a JPEG"),
    ("date_change", "new chart mid-fetch"),
]


@pytest.mark.parametrize(("mode", "reason"), FAILURES)
def test_a_failed_refresh_keeps_the_last_good_snapshot(
    provider: DailyRanking, sample: SampleUpstream, mode: str, reason: str
) -> None:
    provider.refresh(["illust"])
    before = provider.snapshots.latest("illust")
    control(sample, advanceDays=1, fail=mode)

    [report] = provider.refresh(["illust"])

    assert report.failed
    assert reason in report.reason
    assert report.snapshot_id == "illust-20260519"
    assert provider.snapshots.list_ids() == ["illust-20260519"]
    assert provider.snapshots.latest("illust") == before


@pytest.mark.parametrize(("mode", "reason"), FAILURES)
def test_a_failed_first_refresh_writes_no_snapshot_at_all(
    provider: DailyRanking, sample: SampleUpstream, mode: str, reason: str
) -> None:
    control(sample, fail=mode)

    [report] = provider.refresh(["illust"])

    assert report.failed
    assert report.snapshot_id is None
    assert provider.snapshots.list_ids() == []


def test_a_429_is_honoured_with_its_retry_after(
    provider: DailyRanking, sample: SampleUpstream, sleeper: RecordingSleep
) -> None:
    control(sample, fail="rate_limit_once")

    [report] = provider.refresh(["manga"])

    assert report.status == "created"
    assert sleeper.waits == [1.0]


def test_a_persistent_429_gives_up_after_bounded_retries(
    config: DailyRankingSettings, sample: SampleUpstream
) -> None:
    sleeper = RecordingSleep()
    provider = DailyRanking(config.model_copy(update={"rate_limit_retries": 2}), sleep=sleeper)
    control(sample, fail="rate_limit")

    [report] = provider.refresh(["manga"])

    assert report.failed
    assert "429" in report.reason
    assert sleeper.waits == [1.0, 1.0]
    assert provider.snapshots.list_ids() == []
    provider.close()


def test_a_retry_after_beyond_the_cap_aborts_instead_of_waiting(
    config: DailyRankingSettings, sample: SampleUpstream
) -> None:
    sleeper = RecordingSleep()
    capped = config.model_copy(update={"rate_limit_max_wait_seconds": 0.5})
    provider = DailyRanking(capped, sleep=sleeper)
    control(sample, fail="rate_limit_once")

    [report] = provider.refresh(["manga"])

    assert report.failed
    assert sleeper.waits == []
    provider.close()


def test_thumbnails_from_a_host_that_is_not_allowed_are_refused(
    config: DailyRankingSettings, sample: SampleUpstream
) -> None:
    provider = DailyRanking(config.model_copy(update={"image_hosts": "i.pximg.net"}))
    before = control(sample)["requests"]

    [report] = provider.refresh(["manga"])

    assert report.failed
    assert "not an allowed image host" in report.reason
    assert provider.snapshots.list_ids() == []
    # Only the one JSON page was fetched; no thumbnail request left the process.
    assert control(sample)["requests"] - before == 1
    provider.close()


def test_a_refresh_in_another_instance_is_seen_at_once(
    provider: DailyRanking, config: DailyRankingSettings
) -> None:
    other = DailyRanking(config)
    other.refresh(["illust"])

    latest = provider.snapshots.latest("illust")

    assert latest is not None and latest.id == "illust-20260519"
    other.close()


def test_the_scheduler_refreshes_at_start_and_stops_when_told() -> None:
    started = threading.Event()
    calls: list[int] = []

    def refresh_all() -> list[RefreshReport]:
        calls.append(1)
        started.set()
        return []

    scheduler = ScheduledRefresher(refresh_all, interval=3600)
    scheduler.start()
    assert started.wait(10)
    scheduler.stop(timeout=10)

    assert calls == [1]
    assert scheduler.rounds == 1


def test_a_crashing_round_does_not_stop_the_scheduler() -> None:
    second = threading.Event()
    calls: list[int] = []

    def refresh_all() -> list[RefreshReport]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        second.set()
        return []

    scheduler = ScheduledRefresher(refresh_all, interval=0.01)
    scheduler.start()
    assert second.wait(10)
    scheduler.stop(timeout=10)
    assert len(calls) >= 2
