"""`mercato up` publishes the example as a product (issue 41 item 4): its listing page names the
platform as publisher, the same way a provider names itself (spec 1.2), and shows the example
request and result published with v1, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import json
import signal
from collections.abc import Callable

import httpx
import pytest

from builders.demo import UpProcess, free_port, wait_gone
from mercato.catalog.examples import daily_ranking_examples

pytestmark = pytest.mark.functional


def test_the_demo_listing_shows_its_publisher_and_example(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess]
) -> None:
    up = start_up(demo_env, "--json", "--port", str(free_port()))
    info = up.ready_json()
    try:
        page = httpx.get(f"{info['url']}/listings/pixiv.daily-ranking", timeout=30)
        card = httpx.get(f"{info['url']}/", timeout=30)
    finally:
        assert up.stop(signal.SIGINT) == 0
        assert wait_gone(list(info["pids"].values())) == []
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert '<dd id="publisher">Mercato (run by the platform)</dd>' in text
    example = daily_ranking_examples()[0]
    shown = json.dumps(example["request"], indent=2, sort_keys=True, ensure_ascii=False)
    assert f'id="example-request-1">{shown}</pre>' in text
    assert '"snapshotId": "illust-20261206"' in text
    assert "Mercato (run by the platform)" in html.unescape(card.text)
