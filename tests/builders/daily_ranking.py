"""Builders for the daily-ranking example: a running sample upstream, settings, polling."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from builders.servers import serve_in_thread, stop_server
from mercato_examples.daily_ranking.config import DailyRankingSettings
from mercato_examples.daily_ranking.sample_upstream import SampleUpstream

SMALL_SIZES = {"overall": 120, "illust": 60, "manga": 30}
T = TypeVar("T")


@contextmanager
def running_sample(sizes: dict[str, int] | None = None) -> Iterator[SampleUpstream]:
    """A sample upstream on a free loopback port, served from a thread."""
    server = SampleUpstream(sizes=sizes)
    thread = serve_in_thread(server, "sample-upstream")
    try:
        yield server
    finally:
        stop_server(server, thread)


def control(sample: SampleUpstream | str, **body: Any) -> dict[str, Any]:
    """Drive the sample (a server or its base URL) through its HTTP control endpoint."""
    base = sample if isinstance(sample, str) else sample.base
    response = httpx.post(f"{base}/_control", json=body)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def settings_for(sample: SampleUpstream, data_dir: Path, **overrides: Any) -> DailyRankingSettings:
    values: dict[str, Any] = {
        "upstream": sample.base,
        "image_hosts": sample.host_port,
        "data_dir": data_dir,
        "env": "dev",
        "request_delay_seconds": 0,
        "rate_limit_default_wait_seconds": 0,
    }
    values.update(overrides)
    return DailyRankingSettings(**values)


def env_for(upstream: str, image_host: str, data_dir: Path, credential: str) -> dict[str, str]:
    """Environment for a `mercato daily-ranking ...` subprocess (no other MERCATO_* leaks in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    return env | {
        "MERCATO_ENV": "dev",
        "MERCATO_DATA_DIR": str(data_dir),
        "MERCATO_DAILY_RANKING_UPSTREAM": upstream,
        "MERCATO_DAILY_RANKING_IMAGE_HOSTS": image_host,
        "MERCATO_DAILY_RANKING_CREDENTIAL": credential,
        "MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS": "0",
        "MERCATO_DAILY_RANKING_RATE_LIMIT_DEFAULT_WAIT_SECONDS": "0",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(probe: Callable[[], T | None], *, timeout: float = 30.0, what: str = "") -> T:
    """Poll `probe` until it returns a value other than None, within a bounded deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or probe}")
        time.sleep(0.05)


class RecordingSleep:
    """A sleep seam that records the waits asked for instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
