"""The handler: answers from stored snapshots, byte-identical per snapshot, no image addresses."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from builders.daily_ranking import SMALL_SIZES, control, running_sample, settings_for
from mercato.catalog.examples import example_contract as packaged_example
from mercato.provider import DefinedFailure, Success
from mercato_examples.daily_ranking.handler import RESULT_BUDGET_BYTES, RankingHandler
from mercato_examples.daily_ranking.provider import DailyRanking
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream
from mercato_examples.daily_ranking.snapshots import SnapshotEntry, SnapshotStore


def _wire(answer: Success | DefinedFailure) -> bytes:
    """The result as the SDK puts it on the wire."""
    assert isinstance(answer, Success)
    return json.dumps(answer.result_json(), ensure_ascii=False, separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DailyRanking, str]]:
    """One refreshed provider for the read-only tests (refreshing is the slow part)."""
    with running_sample(SMALL_SIZES) as sample:
        provider = DailyRanking(settings_for(sample, tmp_path_factory.mktemp("shared")))
        provider.refresh()
        yield provider, sample.host_port
        provider.close()


@pytest.fixture
def handler(shared: tuple[DailyRanking, str]) -> RankingHandler:
    return RankingHandler(shared[0].snapshots)


@pytest.mark.parametrize("chart", ["overall", "illust", "manga"])
def test_each_chart_answers_its_latest_snapshot_up_to_the_cap(
    handler: RankingHandler, shared: tuple[DailyRanking, str], chart: str
) -> None:
    provider = shared[0]
    answer = handler({"chart": chart, "limit": 7})

    assert isinstance(answer, Success)
    result = answer.result_json()
    assert list(result) == ["snapshotId", "chart", "date", "entries", "artifacts"]
    assert (result["snapshotId"], result["chart"], result["date"]) == (
        f"{chart}-20260519",
        chart,
        "2026-05-19",
    )
    assert [e["rank"] for e in result["entries"]] == [1, 2, 3, 4, 5, 6, 7]
    assert all(
        set(e) == {"rank", "title", "author", "link", "thumbnailDigest"} for e in result["entries"]
    )
    assert [a["artifactId"] for a in result["artifacts"]] == [f"thumb-{r}" for r in range(1, 8)]
    for entry, artifact in zip(result["entries"], result["artifacts"], strict=True):
        assert artifact["digest"] == entry["thumbnailDigest"]
        data = provider.blobs.get(artifact["digest"])
        assert data is not None
        assert (artifact["mediaType"], artifact["size"]) == ("image/png", len(data))


def test_the_default_cap_is_50_and_a_cap_beyond_the_chart_returns_all(
    handler: RankingHandler,
) -> None:
    default = handler({"chart": "overall"})
    explicit_null = handler({"chart": "overall", "limit": None, "snapshotId": None})
    assert explicit_null == default
    everything = handler({"chart": "manga", "limit": 500})

    assert isinstance(default, Success) and isinstance(everything, Success)
    assert len(default.result["entries"]) == 50
    assert len(everything.result["entries"]) == SMALL_SIZES["manga"]


def test_the_full_overall_chart_answers_500(tmp_path: Any) -> None:
    with running_sample() as sample:
        provider = DailyRanking(settings_for(sample, tmp_path))
        provider.refresh(["overall"])
        answer = RankingHandler(provider.snapshots)({"chart": "overall", "limit": 500})
        provider.close()

    assert isinstance(answer, Success)
    assert [e["rank"] for e in answer.result["entries"]] == list(range(1, 501))
    assert len(_wire(answer)) < 262144


def test_the_same_snapshot_gives_byte_identical_results(
    provider: DailyRanking, sample: SampleUpstream
) -> None:
    provider.refresh(["illust"])
    handler = RankingHandler(provider.snapshots)
    first = _wire(handler({"chart": "illust", "limit": 20}))
    control(sample, advanceDays=1)
    provider.refresh(["illust"])

    latest = handler({"chart": "illust", "limit": 20})
    pinned = handler({"chart": "illust", "limit": 20, "snapshotId": "illust-20260519"})

    assert isinstance(latest, Success)
    assert latest.result["snapshotId"] == "illust-20260520"
    assert _wire(pinned) == first
    again = handler({"chart": "illust", "limit": 20, "snapshotId": "illust-20260519"})
    assert _wire(again) == first


def test_no_image_address_appears_in_a_result(
    handler: RankingHandler, shared: tuple[DailyRanking, str]
) -> None:
    image_host = shared[1]
    text = _wire(handler({"chart": "overall", "limit": 500})).decode()

    addresses = re.findall(r"https?://[^\"]*", text)
    assert addresses
    assert all(re.fullmatch(r"https://www\.pixiv\.net/artworks/\d+", a) for a in addresses)
    assert image_host not in text
    assert "pximg" not in text
    assert "img-master" not in text


@pytest.mark.parametrize(
    ("payload", "code", "status"),
    [
        ({"platformConformanceProbe": "x"}, "INVALID_CHART", 400),
        ({"chart": "weekly"}, "INVALID_CHART", 400),
        ({"chart": 1}, "INVALID_CHART", 400),
        ({"chart": None, "limit": 5}, "INVALID_CHART", 400),
        ({"chart": "overall", "limit": 0}, "INVALID_LIMIT", 400),
        ({"chart": "overall", "limit": 501}, "INVALID_LIMIT", 400),
        ({"chart": "overall", "limit": "10"}, "INVALID_LIMIT", 400),
        ({"chart": "overall", "limit": True}, "INVALID_LIMIT", 400),
        ({"chart": "overall", "limit": 2.5}, "INVALID_LIMIT", 400),
        ({"chart": "overall", "snapshotId": "overall-19990101"}, "UNKNOWN_SNAPSHOT", 404),
        ({"chart": "manga", "snapshotId": "overall-20260519"}, "UNKNOWN_SNAPSHOT", 404),
        ({"chart": "manga", "snapshotId": 7}, "UNKNOWN_SNAPSHOT", 404),
    ],
)
def test_bad_payloads_get_defined_failures(
    handler: RankingHandler, payload: dict[str, Any], code: str, status: int
) -> None:
    assert handler(payload) == DefinedFailure(code, status)


def test_before_any_refresh_there_is_no_snapshot_yet(provider: DailyRanking) -> None:
    answer = RankingHandler(provider.snapshots)({"chart": "overall"})

    assert answer == DefinedFailure("NO_SNAPSHOT_YET", 404)


def test_a_result_never_outgrows_the_response_limit(tmp_path: Path) -> None:
    store = SnapshotStore(f"sqlite:///{tmp_path / 'snapshots.db'}")
    long_title = "長い題名" * 40
    entries = [
        SnapshotEntry(
            rank,
            long_title,
            "作者" * 30,
            f"https://www.pixiv.net/artworks/{rank}",
            f"{rank:064x}",
            "image/jpeg",
            123456,
        )
        for rank in range(1, 501)
    ]
    store.commit(
        chart="overall",
        chart_date="20260519",
        fetched_at=dt.datetime(2026, 5, 20, tzinfo=dt.UTC),
        entries=entries,
    )

    answer = RankingHandler(store)({"chart": "overall", "limit": 500})

    assert isinstance(answer, Success)
    size = len(_wire(answer))
    assert RESULT_BUDGET_BYTES - 1024 < size <= RESULT_BUDGET_BYTES
    shown = answer.result["entries"]
    assert [e["rank"] for e in shown] == list(range(1, len(shown) + 1))
    assert len(answer.artifacts) == len(shown) < 500
    store.close()


_LIMITS: list[Any] = [1, 50, 499, 500, 500.0, None, 0, 501, -1, 2.5, "10", True, [5]]
CONTRACT_PAYLOADS: list[dict[str, Any]] = [
    *({"chart": chart, "limit": limit} for chart in ("overall", "manga") for limit in _LIMITS),
    {"chart": "illust"},
    {"chart": "illust", "snapshotId": None, "extra": "members are allowed"},
    {"chart": "weekly"},
    {"chart": None},
    {"limit": 5},
]


@pytest.mark.parametrize("payload", CONTRACT_PAYLOADS, ids=repr)
def test_the_handler_answers_whatever_the_published_request_schema_allows(
    handler: RankingHandler, payload: dict[str, Any]
) -> None:
    """Decision 0205: a value the contract admits is never a handler refusal, and vice versa."""
    schema = packaged_example()["requestSchema"]
    allowed = not list(Draft202012Validator(schema).iter_errors(payload))

    answer = handler(payload)

    assert isinstance(answer, Success) == allowed, answer
