"""The upstream client's guards: image hosts, image sniffing, pacing and 429 back-off."""

from __future__ import annotations

import httpx
import pytest

from builders.daily_ranking import RecordingSleep, settings_for
from mercato_examples.daily_ranking.config import DailyRankingSettings
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream, png_bytes
from mercato_examples.daily_ranking.upstream import (
    IMAGE_REFERER,
    UpstreamClient,
    UpstreamError,
    check_thumbnail_url,
    retry_after_seconds,
    sniff_image,
)

PXIMG = frozenset({"i.pximg.net"})


def test_thumbnails_on_the_allowed_host_pass() -> None:
    check_thumbnail_url("https://i.pximg.net/c/240x480/img-master/img/1_p0.jpg", PXIMG)
    check_thumbnail_url("https://I.PXIMG.NET:443/c/240x480/img-master/a.jpg", PXIMG)
    check_thumbnail_url("http://127.0.0.1:8200/c/a.png", frozenset({"127.0.0.1:8200"}))


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/c/240x480/img-master/a.jpg",
        "https://i.pximg.net.evil.example/c/a.jpg",
        "https://i.pximg.net:8443/c/a.jpg",
        "https://user:pw@i.pximg.net/c/a.jpg",
        "https://i.pximg.net/c/a.jpg?x=1",
        "http://i.pximg.net/c/a.jpg",
        "ftp://i.pximg.net/c/a.jpg",
        "https://i.pximg.net/img-original/img/a.jpg",
        "/c/240x480/a.jpg",
    ],
)
def test_thumbnails_elsewhere_are_refused(url: str) -> None:
    with pytest.raises(UpstreamError):
        check_thumbnail_url(url, PXIMG)


def test_loopback_host_needs_its_port_listed() -> None:
    with pytest.raises(UpstreamError):
        check_thumbnail_url("http://127.0.0.1:9999/c/a.png", frozenset({"127.0.0.1:8200"}))


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (b"\xff\xd8\xff\xe0" + b"\0" * 20, "image/jpeg"),
        (png_bytes(1), "image/png"),
        (b"GIF89a" + b"\0" * 20, "image/gif"),
        (b"RIFF\x10\0\0\0WEBPVP8 ", "image/webp"),
        (b"<html>403</html>", None),
        (b"", None),
    ],
)
def test_magic_bytes_decide_the_media_type(data: bytes, media_type: str | None) -> None:
    assert sniff_image(data) == media_type


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_the_sample_refuses_thumbnails_without_the_pixiv_referer(sample: SampleUpstream) -> None:
    url = f"{sample.base}/c/240x480/img-master/img/2026/05/19/00/00/00/7_p0_master1200.png"
    assert httpx.get(url).status_code == 403
    with_referer = httpx.get(url, headers={"Referer": IMAGE_REFERER})
    assert with_referer.status_code == 200
    assert with_referer.content == png_bytes(7)


def test_requests_are_paced(sample: SampleUpstream, config: DailyRankingSettings) -> None:
    sleeper = RecordingSleep()
    paced = config.model_copy(update={"request_delay_seconds": 1.5})
    with UpstreamClient(paced, sleep=sleeper, monotonic=lambda: 100.0) as client:
        client.fetch_page("manga", 1, chart_date=None)
        client.fetch_page("illust", 1, chart_date=None)
        client.fetch_page("illust", 2, chart_date=None)
    assert sleeper.waits == [1.5, 1.5]


def test_a_thumbnail_answer_that_is_not_an_image_is_refused(
    sample: SampleUpstream, config: DailyRankingSettings
) -> None:
    url = f"{sample.base}/c/240x480/img-master/img/2026/05/19/00/00/00/7_p0_master1200.png"
    with UpstreamClient(config) as client:
        assert client.fetch_thumbnail(url).media_type == "image/png"
        sample.control({"fail": "thumbnail_not_image"})
        with pytest.raises(UpstreamError, match="not a JPEG, PNG, GIF or WebP"):
            client.fetch_thumbnail(url)


def test_oversized_thumbnails_are_refused(sample: SampleUpstream, tmp_path: object) -> None:
    small = settings_for(sample, tmp_path, thumbnail_max_bytes=100)  # type: ignore[arg-type]
    url = f"{sample.base}/c/240x480/img-master/img/2026/05/19/00/00/00/7_p0_master1200.png"
    with UpstreamClient(small) as client, pytest.raises(UpstreamError, match="larger than"):
        client.fetch_thumbnail(url)


def test_redirects_are_not_followed(config: DailyRankingSettings) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "https://elsewhere.example/"})

    with (
        UpstreamClient(config, transport=httpx.MockTransport(answer)) as client,
        pytest.raises(UpstreamError, match="HTTP 302"),
    ):
        client.fetch_page("overall", 1, chart_date=None)
