"""The upstream client: ranking pages and thumbnails, paced, with a bounded 429 back-off."""

from __future__ import annotations

import email.utils
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from mercato_examples.daily_ranking.config import DailyRankingSettings
from mercato_examples.daily_ranking.parsing import (
    CONTENT_OF_CHART,
    RankingPage,
    decode_json_object,
    parse_page,
)

USER_AGENT = "Mozilla/5.0 (compatible; MercatoDailyRanking/1.0)"
RANKING_REFERER = "https://www.pixiv.net/ranking.php?mode=daily"
IMAGE_REFERER = "https://www.pixiv.net/"
PAGE_MAX_BYTES = 4 * 1024 * 1024
_RETRY_STATUSES = frozenset({429, 503})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UpstreamError(Exception):
    """The upstream did not give what a refresh needs; the refresh must fail."""


@dataclass(frozen=True, slots=True)
class Thumbnail:
    data: bytes
    media_type: str


def sniff_image(data: bytes) -> str | None:
    """Return the media type the magic bytes announce (JPEG, PNG, GIF, WebP), else None."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_thumbnail_url(url: str, allowed_hosts: frozenset[str]) -> None:
    """Refuse any thumbnail address that is not on an allowed image host (research §6 rule 1)."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise UpstreamError("thumbnail address is not an http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise UpstreamError("thumbnail address carries user info")
    if parts.query or parts.fragment:
        raise UpstreamError("thumbnail address carries a query or fragment")
    host = parts.hostname.lower()
    try:
        port = parts.port
    except ValueError as exc:
        raise UpstreamError("thumbnail address has a bad port") from exc
    if port == _DEFAULT_PORTS[parts.scheme]:
        port = None
    host_port = host if port is None else f"{host}:{port}"
    if host_port not in allowed_hosts:
        raise UpstreamError(f"thumbnail host {host_port} is not an allowed image host")
    if parts.scheme == "http" and not _is_loopback(host):
        raise UpstreamError("thumbnails from a non-loopback host must use https")
    if "/img-original/" in parts.path:
        raise UpstreamError("refusing to fetch a full-size original")


def retry_after_seconds(value: str | None) -> float | None:
    """Parse Retry-After (delta seconds or an HTTP date) into seconds from now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class UpstreamClient:
    """Speaks to the upstream and its image host; one instance per refresh run."""

    def __init__(
        self,
        config: DailyRankingSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._sleep = sleep
        self._monotonic = monotonic
        self._last_request: float | None = None
        self._http = httpx.Client(
            transport=transport,
            timeout=config.http_timeout_seconds,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> UpstreamClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _pace(self) -> None:
        delay = self._config.request_delay_seconds
        if self._last_request is not None and delay > 0:
            remaining = self._last_request + delay - self._monotonic()
            if remaining > 0:
                self._sleep(remaining)
        self._last_request = self._monotonic()

    def _get(
        self,
        url: str,
        *,
        headers: dict[str, str],
        max_bytes: int,
        params: dict[str, str] | None = None,
    ) -> tuple[httpx.Response, bytes]:
        """GET with pacing; on 429/503 wait (Retry-After, else exponential); bounded."""
        cfg = self._config
        for attempt in range(cfg.rate_limit_retries + 1):
            self._pace()
            try:
                with self._http.stream("GET", url, params=params, headers=headers) as response:
                    body = self._read_capped(response, max_bytes)
            except httpx.HTTPError as exc:
                raise UpstreamError(f"request failed: {type(exc).__name__}") from exc
            if response.status_code not in _RETRY_STATUSES:
                return response, body
            wait = retry_after_seconds(response.headers.get("Retry-After"))
            if wait is None:
                wait = cfg.rate_limit_default_wait_seconds * (2**attempt)
            if attempt == cfg.rate_limit_retries or wait > cfg.rate_limit_max_wait_seconds:
                break
            self._sleep(wait)
        raise UpstreamError(f"upstream still answers {response.status_code} after back-off")

    @staticmethod
    def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise UpstreamError(f"response larger than {max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def fetch_page(self, chart: str, page: int, *, chart_date: str | None) -> RankingPage | None:
        """Fetch and parse one page; None when the upstream says the page does not exist (404)."""
        params = {"mode": "daily"}
        if chart != "overall":
            params["content"] = CONTENT_OF_CHART[chart]
        params["p"] = str(page)
        if chart_date is not None:
            params["date"] = chart_date
        params["format"] = "json"
        response, body = self._get(
            f"{self._config.upstream}/ranking.php",
            params=params,
            headers={"Referer": RANKING_REFERER, "Accept": "application/json"},
            max_bytes=PAGE_MAX_BYTES,
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise UpstreamError(f"ranking page {page} answered HTTP {response.status_code}")
        return parse_page(decode_json_object(body), chart=chart, page=page)

    def fetch_thumbnail(self, url: str) -> Thumbnail:
        """Download one thumbnail from an allowed image host and check that it is an image."""
        check_thumbnail_url(url, self._config.allowed_image_hosts)
        response, body = self._get(
            url,
            headers={"Referer": IMAGE_REFERER, "Accept": "image/*"},
            max_bytes=self._config.thumbnail_max_bytes,
        )
        if response.status_code != 200:
            raise UpstreamError(f"thumbnail answered HTTP {response.status_code}")
        declared = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if not declared.startswith("image/"):
            raise UpstreamError(f"thumbnail Content-Type is {declared or 'missing'}")
        media_type = sniff_image(body)
        if media_type is None:
            raise UpstreamError("thumbnail bytes are not a JPEG, PNG, GIF or WebP image")
        return Thumbnail(body, media_type)
