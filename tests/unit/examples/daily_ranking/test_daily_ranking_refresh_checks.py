"""Refresh consistency checks on hand-made upstream pages (httpx MockTransport, no network)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.daily_ranking import RecordingSleep
from mercato_examples.daily_ranking.config import DailyRankingSettings
from mercato_examples.daily_ranking.provider import DailyRanking
from mercato_examples.daily_ranking.sample_upstream import png_bytes

NOW = dt.datetime(2026, 5, 20, 3, 0, tzinfo=dt.UTC)


def _work(rank: int, *, illust_id: int | None = None, sexual: int = 0) -> dict[str, Any]:
    ident = illust_id if illust_id is not None else 1000 + rank
    return {
        "rank": rank,
        "title": f"t{rank}",
        "user_name": f"a{rank}",
        "illust_id": ident,
        "url": f"https://i.pximg.net/c/240x480/img-master/img/{ident}_p0.jpg",
        "illust_content_type": {"sexual": sexual},
    }


def _page(
    works: list[dict[str, Any]], *, next_page: Any = False, total: int | None = None, page: int = 1
) -> dict[str, Any]:
    return {
        "contents": works,
        "mode": "daily",
        "content": "manga",
        "page": page,
        "prev": False,
        "next": next_page,
        "date": "20260519",
        "prev_date": "20260518",
        "next_date": False,
        "rank_total": total if total is not None else len(works),
    }


def _provider(
    tmp_path: Path, pages: dict[int, dict[str, Any]], thumbnail: httpx.Response | None = None
) -> DailyRanking:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ranking.php":
            page = pages.get(int(request.url.params["p"]))
            return httpx.Response(200, json=page) if page else httpx.Response(404)
        if thumbnail is not None:
            return thumbnail
        ident = int(request.url.path.rsplit("/", 1)[1].split("_")[0])
        return httpx.Response(200, content=png_bytes(ident), headers={"Content-Type": "image/png"})

    config = DailyRankingSettings(data_dir=tmp_path, env="dev", request_delay_seconds=0)
    return DailyRanking(
        config, transport=httpx.MockTransport(answer), sleep=RecordingSleep(), now=lambda: NOW
    )


def _refresh(provider: DailyRanking) -> tuple[str, str]:
    [report] = provider.refresh(["manga"])
    return report.status, report.reason


def test_a_consistent_chart_is_stored(tmp_path: Path) -> None:
    provider = _provider(tmp_path, {1: _page([_work(1), _work(2)])})
    assert _refresh(provider) == ("created", "")
    snapshot = provider.snapshots.latest("manga")
    assert snapshot is not None and snapshot.fetched_at == NOW


@pytest.mark.parametrize(
    ("pages", "reason"),
    [
        ({1: _page([_work(2), _work(3)])}, "starts at rank 2"),
        ({1: _page([_work(1), _work(1, illust_id=9)])}, "not increasing"),
        ({1: _page([_work(1), _work(2, illust_id=1001)])}, "twice"),
        ({1: _page([_work(1)], total=100)}, "truncated"),
        ({1: _page([_work(1)], next_page=2, total=2)}, "truncated"),
        ({1: _page([])}, "no entries"),
        ({}, "404"),
    ],
)
def test_an_inconsistent_chart_is_refused(
    tmp_path: Path, pages: dict[int, dict[str, Any]], reason: str
) -> None:
    provider = _provider(tmp_path, pages)
    status, why = _refresh(provider)
    assert status == "failed"
    assert reason in why
    assert provider.snapshots.list_ids() == []


def test_an_entry_marked_sexual_is_dropped(tmp_path: Path) -> None:
    provider = _provider(tmp_path, {1: _page([_work(1), _work(2, sexual=1), _work(3)])})
    assert _refresh(provider)[0] == "created"
    snapshot = provider.snapshots.latest("manga")
    assert snapshot is not None
    assert [e.rank for e in snapshot.entries] == [1, 3]


@pytest.mark.parametrize(
    ("thumbnail", "reason"),
    [
        (
            httpx.Response(200, content=png_bytes(1), headers={"Content-Type": "text/html"}),
            "Content-Type",
        ),
        (
            httpx.Response(200, content=b"<html>no</html>", headers={"Content-Type": "image/jpeg"}),
            "not a JPEG",
        ),
        (httpx.Response(403, content=b"Forbidden"), "HTTP 403"),
    ],
)
def test_a_bad_thumbnail_answer_fails_the_refresh(
    tmp_path: Path, thumbnail: httpx.Response, reason: str
) -> None:
    provider = _provider(tmp_path, {1: _page([_work(1)])}, thumbnail=thumbnail)
    status, why = _refresh(provider)
    assert status == "failed" and reason in why


def test_the_page_json_may_use_php_escapes(tmp_path: Path) -> None:
    body = json.dumps(_page([_work(1)])).replace("/", "\\/").encode()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ranking.php":
            return httpx.Response(200, content=body)
        return httpx.Response(200, content=png_bytes(1), headers={"Content-Type": "image/png"})

    config = DailyRankingSettings(data_dir=tmp_path, env="dev", request_delay_seconds=0)
    provider = DailyRanking(config, transport=httpx.MockTransport(answer))
    assert _refresh(provider)[0] == "created"
