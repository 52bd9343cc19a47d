"""Real `mercato serve` / `mercato worker` processes for functional tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def platform_env(db_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(
        MERCATO_ENV="dev",
        MERCATO_DATABASE_URL=db_url,
        MERCATO_DATA_DIR=str(data_dir),
        MERCATO_PROVIDER_TIMEOUT_SECONDS="1",
        MERCATO_IDEMPOTENCY_LEASE_SECONDS="1",
        MERCATO_DEFAULT_QUOTA_LIMIT="1000",
    )
    env.update(extra)
    return env


def mercato(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Serve:
    """One `mercato serve` on a free port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mercato", "serve", "--port", str(self.port)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: self._ready(), what="serve to start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"serve exited with {self.process.returncode}")
        try:
            return httpx.get(self.url + "/health/live", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


class Worker:
    """One `mercato worker` running its loops until stopped."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mercato", "worker", "--idle-seconds", "0.1"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


def wait_for(condition: Callable[[], Any], *, what: str, timeout: float = 60) -> Any:
    """Poll `condition` until it is truthy or the deadline passes (then fail loudly)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
