"""Browser tests: real headless Chromium (Debian's package) against a real `mercato serve`.

Playwright drives /usr/bin/chromium; it never downloads a browser. The example provider
(`mercato daily-ranking serve` over `mercato sample-upstream serve`) is the real provider.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    CREDENTIAL,
    PASSWORD,
    PROVIDER_EMAIL,
    STAFF_EMAIL,
    Platform,
)
from builders.daily_ranking import env_for, free_port, wait_for
from builders.platform_process import Serve, platform_env, probe

playwright_api = pytest.importorskip("playwright.sync_api")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _ok(url: str) -> bool | None:
    try:
        return probe().get(url, timeout=2).status_code == 200 or None
    except httpx.HTTPError:
        return None


@pytest.fixture
def sample_base(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "sample.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "mercato", "sample-upstream", "serve", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ok(f"{base}/_control"), what="sample upstream")
        yield base
    finally:
        _stop(process)
        log.close()


@pytest.fixture
def ranking_url(sample_base: str, tmp_path: Path) -> Iterator[str]:
    """`mercato daily-ranking serve`, ready once its first manga snapshot answers."""
    env = env_for(sample_base, sample_base.removeprefix("http://"), tmp_path / "rank", CREDENTIAL)
    port = free_port()
    log = (tmp_path / "ranking.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "mercato", "daily-ranking", "serve", "--port", str(port)],
        env=env | {"MERCATO_DAILY_RANKING_REFRESH_INTERVAL_SECONDS": "3600"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def snapshot_ready() -> bool | None:
        try:
            answer = httpx.post(
                f"{base}/v1/executions",
                json={"payload": {"chart": "manga", "limit": 1}},
                headers={
                    "Authorization": f"Bearer {CREDENTIAL}",
                    "Idempotency-Key": f"warm-up-{uuid.uuid4().hex}",
                },
                timeout=5,
            )
        except httpx.HTTPError:
            return None
        return answer.json().get("outcome") == "SUCCEEDED" or None

    try:
        wait_for(snapshot_ready, timeout=120, what="the first ranking snapshot")
        yield base
    finally:
        _stop(process)
        log.close()


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    env = platform_env(db_url, tmp_path / "platform")
    serve = Serve(env, tmp_path / "serve.log")
    platform = Platform(serve.url, env, tmp_path)
    platform.cli("admin", "create-account", STAFF_EMAIL, "--password", PASSWORD, "--staff")
    platform.cli("admin", "create-account", PROVIDER_EMAIL, "--password", PASSWORD)
    try:
        yield platform
    finally:
        serve.stop()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            "Debian's chromium is required for the browser tests (scripts/test installs it)"
        )
    with playwright_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def new_page(chromium: Any) -> Iterator[Any]:
    """Open a page in a fresh browser context (its own cookies); phone width when asked."""
    contexts: list[Any] = []

    def open_page(*, phone: bool = False) -> Any:
        viewport = {"width": 390, "height": 844} if phone else {"width": 1280, "height": 900}
        context = chromium.new_context(viewport=viewport)
        context.set_default_timeout(30_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()
