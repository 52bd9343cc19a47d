"""Parsing the upstream's ranking pages: tolerant of its quirks, strict about what we need."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mercato_examples.daily_ranking.parsing import (
    UpstreamFormatError,
    artwork_link,
    as_int,
    decode_json_object,
    iso_date,
    optional_int,
    parse_page,
)

# Research §4's sample, cut to one entry, with the PHP-style "\/" escapes of a real body.
RAW_PAGE = (
    rb'{"contents":[{"title":"\u5915\u51ea\u306e\u706f\u53f0",'
    rb'"date":"2026\u5e7405\u670819\u65e5 00:00","tags":["\u30aa\u30ea\u30b8\u30ca\u30eb"],'
    rb'"url":"https:\/\/i.pximg.net\/c\/240x480\/img-master\/img\/2026\/05\/19\/00\/00\/17'
    rb'\/140000001_p0_master1200.jpg",'
    rb'"illust_type":"0","illust_book_style":"0","illust_page_count":"1",'
    rb'"user_name":"\u5bb5\u6708\u30df\u30ca\u30c8",'
    rb'"profile_img":"https:\/\/i.pximg.net\/user-profile\/img\/25000001_50.jpg",'
    rb'"illust_content_type":{"sexual":0,"lo":false},"illust_series":false,"illust_id":140000001,'
    rb'"width":1447,"height":2046,"user_id":25000001,"rank":1,"yes_rank":0,"attr":"original",'
    rb'"is_bookmarked":false,"bookmarkable":true,"some_future_field":{"x":1}}],'
    rb'"mode":"daily","content":"all","page":1,"prev":false,"next":2,"date":"20260519",'
    rb'"prev_date":"20260518","next_date":false,"rank_total":500}'
)


def _page(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RAW_PAGE)
    data.update(changes)
    return data


def test_a_real_shaped_page_parses_and_unknown_fields_are_ignored() -> None:
    page = parse_page(decode_json_object(RAW_PAGE), chart="overall", page=1)

    assert page.chart_date == "20260519"
    assert page.next_page == 2
    assert page.rank_total == 500
    [work] = page.works
    assert (work.rank, work.illust_id) == (1, 140000001)
    assert (work.title, work.author) == ("夕凪の灯台", "宵月ミナト")
    assert work.thumbnail_url.startswith("https://i.pximg.net/c/240x480/img-master/")


def test_numbers_may_arrive_as_strings() -> None:
    data = _page(page="1", next="2", rank_total="500")
    data["contents"][0].update(rank="1", illust_id="140000001")

    page = parse_page(data, chart="overall", page=1)

    assert (page.page, page.next_page, page.rank_total) == (1, 2, 500)
    assert (page.works[0].rank, page.works[0].illust_id) == (1, 140000001)


@pytest.mark.parametrize("falsy", [False, None, ""])
def test_false_null_or_empty_next_means_last_page(falsy: object) -> None:
    assert parse_page(_page(next=falsy), chart="overall", page=1).next_page is None


def test_optional_int_and_as_int_reject_booleans_and_words() -> None:
    assert optional_int(False, field="next") is None
    assert optional_int(None, field="next") is None
    with pytest.raises(UpstreamFormatError):
        as_int(True, field="rank")
    with pytest.raises(UpstreamFormatError):
        as_int("one", field="rank")


@pytest.mark.parametrize("member", ["user_name", "title", "url", "rank", "illust_id"])
def test_an_entry_without_a_needed_member_is_refused(member: str) -> None:
    data = _page()
    del data["contents"][0][member]
    with pytest.raises(UpstreamFormatError):
        parse_page(data, chart="overall", page=1)


@pytest.mark.parametrize(
    ("changes", "chart"),
    [
        ({"contents": None}, "overall"),
        ({"mode": "weekly"}, "overall"),
        ({"content": "all"}, "manga"),
        ({"date": "2026-05-19"}, "overall"),
        ({"date": False}, "overall"),
        ({"page": 3}, "overall"),
    ],
)
def test_a_page_that_is_not_the_one_asked_for_is_refused(
    changes: dict[str, Any], chart: str
) -> None:
    with pytest.raises(UpstreamFormatError):
        parse_page(_page(**changes), chart=chart, page=1)


@pytest.mark.parametrize("body", [b"<!DOCTYPE html><html></html>", b"[1, 2]", b"\xff\xfe"])
def test_html_or_non_object_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(UpstreamFormatError):
        decode_json_object(body)


def test_dates_and_links() -> None:
    assert iso_date("20260519") == "2026-05-19"
    assert artwork_link(140000001) == "https://www.pixiv.net/artworks/140000001"
