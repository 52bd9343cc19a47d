"""An offline, deterministic stand-in for the upstream: ranking pages and generated thumbnails.

It speaks the upstream's exact JSON shape (a bare object, PHP-style `\\/` escapes, numbers that
arrive as strings) and serves small PNG thumbnails from its own host. `POST /_control` injects
failures and advances the chart date, so tests and the demo can exercise every refresh path.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
import json
import random
import re
import struct
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAIL_MODES = frozenset(
    {
        "http_500",
        "html",
        "missing_fields",
        "thumbnail_404",
        "thumbnail_not_image",
        "date_change",
        "rate_limit_once",
        "rate_limit",
    }
)
DEFAULT_SIZES = {"overall": 500, "illust": 100, "manga": 50}
FIRST_DATE = dt.date(2026, 5, 19)
PAGE_SIZE = 50
PIXIV_REFERER = "https://www.pixiv.net/"
_CONTENT = {"all": "overall", "illust": "illust", "manga": "manga"}
_THUMB_PATH = re.compile(
    r"^/c/240x480/img-master/img/(\d{4}/\d\d/\d\d)/00/00/00/(\d+)_p0_master1200\.png$"
)

_WORDS = [
    "夕凪",
    "灯台",
    "星祭り",
    "魔法使い",
    "放課後",
    "雨上がり",
    "海辺",
    "白昼夢",
    "花火",
    "森の奥",
    "猫",
    "月光",
    "旅路",
    "約束",
    "Morning",
    "Blue",
    "Garden",
    "Letter",
]
_NAMES = [
    "宵月ミナト",
    "くろまめ工房",
    "Aoi Kiriha",
    "しろくま",
    "Tanaka",
    "ねこまた",
    "Rin",
    "柚子",
]


def png_bytes(seed: int, size: int = 24) -> bytes:
    """Return a valid RGB PNG whose pixels derive from `seed` (pure Python, deterministic)."""
    stream = b""
    counter = 0
    rows = []
    for _y in range(size):
        needed = size * 3
        while len(stream) < needed:
            stream += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
            counter += 1
        rows.append(b"\x00" + stream[:needed])
        stream = stream[needed:]

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + chunk(b"IEND", b"")
    )


@functools.lru_cache(maxsize=2048)
def _cached_png(seed: int) -> bytes:
    return png_bytes(seed)


def _ymd(day: dt.date) -> str:
    return day.strftime("%Y%m%d")


@dataclass
class SampleState:
    """What the sample serves now; changed through `/_control`."""

    sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    day: dt.date = FIRST_DATE
    fail: str | None = None
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@functools.lru_cache(maxsize=64)
def chart_works(chart: str, day: dt.date, count: int, image_base: str) -> list[dict[str, Any]]:
    """Return the deterministic entries of one chart on one day, in the upstream's shape."""
    rng = random.Random(f"{chart}:{_ymd(day)}")
    base_id = (
        140_000_000
        + (day - FIRST_DATE).days * 10_000
        + {"overall": 0, "illust": 3000, "manga": 6000}[chart]
    )
    works = []
    for index in range(count):
        illust_id = base_id + index + 1
        illust_type = {"overall": rng.choice("001"), "illust": "0", "manga": "1"}[chart]
        title = f"{rng.choice(_WORDS)}の{rng.choice(_WORDS)} #{index + 1}"
        works.append(
            {
                "title": title,
                "date": f"{day:%Y年%m月%d日} 00:00",
                "tags": [rng.choice(_WORDS), "オリジナル"],
                "url": f"{image_base}/c/240x480/img-master/img/{day:%Y/%m/%d}/00/00/00/"
                f"{illust_id}_p0_master1200.png",
                "illust_type": illust_type,
                "illust_book_style": "0",
                "illust_page_count": str(rng.randint(1, 4)),
                "user_name": rng.choice(_NAMES),
                "profile_img": f"{image_base}/user-profile/img/{illust_id % 997}_50.png",
                "illust_content_type": {
                    "sexual": 0,
                    "lo": False,
                    "grotesque": False,
                    "violent": False,
                    "original": True,
                },
                "illust_series": False,
                "illust_id": illust_id,
                "width": 1200,
                "height": 1700,
                "user_id": 25_000_000 + rng.randint(1, 9999),
                "rank": index + 1,
                "yes_rank": rng.choice([0, rng.randint(1, 500)]),
                "rating_count": rng.randint(100, 5000),
                "view_count": rng.randint(1000, 90000),
                "illust_upload_timestamp": 1_779_000_000 + (day - FIRST_DATE).days * 86400,
                "attr": "original",
                "is_bookmarked": False,
                "bookmarkable": True,
            }
        )
    return works


def ranking_page(
    state: SampleState, *, chart: str, page: int, day: dt.date, image_base: str
) -> dict[str, Any] | None:
    """Return one page of a chart, or None past the end (the upstream answers 404 there)."""
    total = state.sizes[chart]
    pages = max(1, -(-total // PAGE_SIZE))
    if page < 1 or page > pages:
        return None
    works = copy.deepcopy(
        chart_works(chart, day, total, image_base)[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    )
    newest = day >= state.day
    return {
        "contents": works,
        "mode": "daily",
        "content": {"overall": "all", "illust": "illust", "manga": "manga"}[chart],
        "page": page,
        "prev": page - 1 if page > 1 else False,
        "next": page + 1 if page < pages else False,
        "date": _ymd(day),
        "prev_date": _ymd(day - dt.timedelta(days=1)),
        "next_date": False if newest else _ymd(day + dt.timedelta(days=1)),
        "rank_total": total,
    }


def php_json(data: Any) -> bytes:
    """Encode like PHP's json_encode: ASCII with \\u escapes and `/` escaped as `\\/`."""
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/").encode()


class _Handler(BaseHTTPRequestHandler):
    server: SampleUpstream
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet; the sample is a test fixture."""

    def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        state = self.server.state
        with state.lock:
            state.requests += 1
            fail = state.fail
            if fail in ("rate_limit_once", "rate_limit") and parts.path != "/_control":
                if fail == "rate_limit_once":
                    state.fail = None
                self._send(429, b"Too Many Requests", "text/plain", Retry_After="1")
                return
        if parts.path == "/ranking.php":
            self._ranking(parse_qs(parts.query), fail)
        elif parts.path == "/_control":
            self._send(200, json.dumps(self._describe()).encode(), "application/json")
        elif match := _THUMB_PATH.match(parts.path):
            self._thumbnail(int(match.group(2)), fail)
        else:
            self._send(404, b"not found", "text/plain")

    def _ranking(self, query: dict[str, list[str]], fail: str | None) -> None:
        state = self.server.state
        chart = _CONTENT.get(query.get("content", ["all"])[0])
        if query.get("mode") != ["daily"] or chart is None:
            self._send(400, b"unsupported mode or content", "text/plain")
            return
        if query.get("format") != ["json"]:
            self._send(200, b"<!DOCTYPE html><html><body>ranking</body></html>", "text/html")
            return
        if fail == "http_500":
            self._send(500, b"Internal Server Error", "text/plain")
            return
        if fail == "html":
            self._send(
                200,
                b"<!DOCTYPE html><html><title>Just a moment...</title></html>",
                "text/html; charset=UTF-8",
            )
            return
        page = int(query.get("p", ["1"])[0])
        day = state.day
        if "date" in query:
            day = dt.datetime.strptime(query["date"][0], "%Y%m%d").date()
        if fail == "date_change" and page > 1:
            day = state.day + dt.timedelta(days=1)
        data = ranking_page(state, chart=chart, page=page, day=day, image_base=self.server.base)
        if data is None:
            self._send(404, php_json({"error": True, "message": "not found"}), "application/json")
            return
        if fail == "missing_fields":
            for entry in data["contents"]:
                entry.pop("user_name", None)
        self._send(200, php_json(data), "application/json; charset=utf-8")

    def _thumbnail(self, illust_id: int, fail: str | None) -> None:
        if not (self.headers.get("Referer") or "").startswith(PIXIV_REFERER):
            self._send(403, b"Forbidden", "text/html")
        elif fail == "thumbnail_404":
            self._send(404, b"<html>404</html>", "text/html")
        elif fail == "thumbnail_not_image":
            self._send(200, b"<html>placeholder</html>", "image/png")
        else:
            self._send(200, _cached_png(illust_id), "image/png", Cache_Control="max-age=31536000")

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/_control":
            self._send(404, b"not found", "text/plain")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            self.server.control(body)
        except (ValueError, TypeError) as exc:
            self._send(400, json.dumps({"error": str(exc)}).encode(), "application/json")
            return
        self._send(200, json.dumps(self._describe()).encode(), "application/json")

    def _describe(self) -> dict[str, Any]:
        state = self.server.state
        with state.lock:
            return {
                "date": _ymd(state.day),
                "fail": state.fail,
                "requests": state.requests,
                "sizes": dict(state.sizes),
            }


class SampleUpstream(ThreadingHTTPServer):
    """The sample upstream server; `base` is its own address, also used for thumbnail URLs."""

    daemon_threads = True

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, sizes: dict[str, int] | None = None
    ) -> None:
        super().__init__((host, port), _Handler)
        self.host = host
        self.state = SampleState(sizes={**DEFAULT_SIZES, **(sizes or {})})

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def host_port(self) -> str:
        """The `host:port` to allow in MERCATO_DAILY_RANKING_IMAGE_HOSTS."""
        return f"{self.host}:{self.port}"

    @property
    def base(self) -> str:
        return f"http://{self.host_port}"

    def control(self, body: Any) -> None:
        """Apply a control request: {"fail": mode|null} and/or {"advanceDays": n}."""
        if not isinstance(body, dict):
            raise ValueError("control body must be an object")
        with self.state.lock:
            if "fail" in body:
                if body["fail"] is not None and body["fail"] not in FAIL_MODES:
                    raise ValueError(f"unknown fail mode {body['fail']!r}")
                self.state.fail = body["fail"]
            days = body.get("advanceDays", 0)
            if not isinstance(days, int) or isinstance(days, bool) or days < 0:
                raise ValueError("advanceDays must be a non-negative integer")
            self.state.day += dt.timedelta(days=days)

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread (tests); stop with shutdown() then server_close()."""
        thread = threading.Thread(
            target=self.serve_forever, args=(0.05,), name="sample-upstream", daemon=True
        )
        thread.start()
        return thread
