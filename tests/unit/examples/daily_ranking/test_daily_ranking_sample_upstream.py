"""The sample upstream: the upstream's exact shape, deterministic, steerable."""

from __future__ import annotations

import struct
import zlib

import httpx

from builders.daily_ranking import control
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream, png_bytes


def _page(sample: SampleUpstream, query: str) -> httpx.Response:
    return httpx.get(f"{sample.base}/ranking.php?mode=daily{query}&format=json")


def test_pages_are_bare_objects_with_php_escapes_and_string_numbers(
    sample: SampleUpstream,
) -> None:
    response = _page(sample, "&p=1")

    assert response.status_code == 200
    assert b"\\/" in response.content and b"/" not in response.content.replace(b"\\/", b"")
    data = response.json()
    assert set(data) == {
        "contents",
        "mode",
        "content",
        "page",
        "prev",
        "next",
        "date",
        "prev_date",
        "next_date",
        "rank_total",
    }
    assert (data["content"], data["page"], data["prev"], data["next"]) == ("all", 1, False, 2)
    entry = data["contents"][0]
    assert isinstance(entry["illust_type"], str) and isinstance(entry["illust_page_count"], str)
    assert isinstance(entry["illust_id"], int)


def test_the_last_page_says_next_false_and_past_it_is_404(sample: SampleUpstream) -> None:
    assert _page(sample, "&content=manga&p=1").json()["next"] is False
    assert _page(sample, "&content=manga&p=2").status_code == 404


def test_the_same_day_gives_the_same_bytes_and_a_new_day_a_new_chart(
    sample: SampleUpstream,
) -> None:
    first = _page(sample, "&content=illust&p=2").content
    assert _page(sample, "&content=illust&p=2").content == first
    contents = _page(sample, "&content=illust&p=2").json()["contents"]

    assert control(sample, advanceDays=1)["date"] == "20260520"

    assert _page(sample, "&content=illust&p=2").json()["date"] == "20260520"
    pinned = _page(sample, "&content=illust&p=2&date=20260519").json()
    assert (pinned["date"], pinned["next_date"]) == ("20260519", "20260520")
    assert pinned["contents"] == contents


def test_generated_thumbnails_are_valid_pngs() -> None:
    data = png_bytes(42)
    assert data == png_bytes(42) and data != png_bytes(43)
    offset = 8
    kinds = []
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IDAT":
            assert len(zlib.decompress(body)) == 24 * (1 + 24 * 3)
        kinds.append(kind)
        offset += 12 + length
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]


def test_unknown_fail_modes_are_refused(sample: SampleUpstream) -> None:
    response = httpx.post(f"{sample.base}/_control", json={"fail": "meteor"})
    assert response.status_code == 400
