"""Tolerant parsing of the upstream's `ranking.php?format=json` pages (research §3)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PAGE_SIZE = 50
_DATE = re.compile(r"^\d{8}$")
# The `content` member the upstream echoes for each chart.
CONTENT_OF_CHART = {"overall": "all", "illust": "illust", "manga": "manga"}


class UpstreamFormatError(ValueError):
    """A page is not what the upstream's JSON shape promises."""


@dataclass(frozen=True, slots=True)
class RankedWork:
    rank: int
    title: str
    author: str
    illust_id: int
    thumbnail_url: str
    sexual: int


@dataclass(frozen=True, slots=True)
class RankingPage:
    chart_date: str
    page: int
    next_page: int | None
    rank_total: int | None
    works: tuple[RankedWork, ...]


def as_int(value: Any, *, field: str) -> int:
    """Accept an int or a string of digits (the upstream sends some numbers as strings)."""
    if isinstance(value, bool):
        raise UpstreamFormatError(f"{field} is a boolean, not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value.strip())
    raise UpstreamFormatError(f"{field} is not a number: {value!r}")


def optional_int(value: Any, *, field: str) -> int | None:
    """Like as_int, but `false`, `null` and "" mean absent."""
    if value is None or value is False or value == "":
        return None
    return as_int(value, field=field)


def _text(entry: dict[str, Any], name: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str):
        raise UpstreamFormatError(f"entry member {name} is missing or not a string")
    return value


def _work(entry: Any) -> RankedWork:
    if not isinstance(entry, dict):
        raise UpstreamFormatError("an entry is not an object")
    content_type = entry.get("illust_content_type")
    sexual = 0
    if isinstance(content_type, dict):
        sexual = optional_int(content_type.get("sexual"), field="illust_content_type.sexual") or 0
    return RankedWork(
        rank=as_int(entry.get("rank"), field="rank"),
        title=_text(entry, "title"),
        author=_text(entry, "user_name"),
        illust_id=as_int(entry.get("illust_id"), field="illust_id"),
        thumbnail_url=_text(entry, "url"),
        sexual=sexual,
    )


def decode_json_object(body: bytes) -> dict[str, Any]:
    """Decode a response body that must be a bare JSON object (not HTML, not an array)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UpstreamFormatError("the response is not JSON (an HTML page?)") from exc
    if not isinstance(data, dict):
        raise UpstreamFormatError("the response is not a JSON object")
    return data


def parse_page(data: dict[str, Any], *, chart: str, page: int) -> RankingPage:
    """Check one decoded page against the chart and page asked for, and extract its works."""
    if data.get("mode") != "daily":
        raise UpstreamFormatError(f"mode is {data.get('mode')!r}, expected 'daily'")
    if data.get("content") != CONTENT_OF_CHART[chart]:
        raise UpstreamFormatError(f"content is {data.get('content')!r} for chart {chart}")
    chart_date = data.get("date")
    if not isinstance(chart_date, str) or not _DATE.match(chart_date):
        raise UpstreamFormatError(f"date is not YYYYMMDD: {chart_date!r}")
    contents = data.get("contents")
    if not isinstance(contents, list):
        raise UpstreamFormatError("contents is missing or not a list")
    got_page = optional_int(data.get("page"), field="page")
    if got_page is not None and got_page != page:
        raise UpstreamFormatError(f"asked for page {page}, got page {got_page}")
    return RankingPage(
        chart_date=chart_date,
        page=page,
        next_page=optional_int(data.get("next"), field="next"),
        rank_total=optional_int(data.get("rank_total"), field="rank_total"),
        works=tuple(_work(entry) for entry in contents),
    )


def iso_date(chart_date: str) -> str:
    """Turn the upstream's YYYYMMDD into YYYY-MM-DD."""
    return f"{chart_date[:4]}-{chart_date[4:6]}-{chart_date[6:]}"


def artwork_link(illust_id: int) -> str:
    return f"https://www.pixiv.net/artworks/{illust_id}"
