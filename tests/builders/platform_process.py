"""Real `mercato serve` / `mercato worker` processes for functional tests."""

from __future__ import annotations

import functools
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

from builders.accounts import PASSWORD_HASH_MEMORY_KIB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def platform_env(db_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a `mercato` process a test starts (dev unless `extra` says otherwise;
    a dev process hashes passwords at the test cost, decision 0310)."""
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
    if env["MERCATO_ENV"] == "dev":
        env.setdefault("MERCATO_PASSWORD_HASH_MEMORY_KIB", str(PASSWORD_HASH_MEMORY_KIB))
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


@functools.cache
def probe() -> httpx.Client:
    """The HTTP client of every readiness poll in this test process (decision 0394).

    `httpx.get` builds a client, and with it the TLS trust store, for each call: about 20 ms of
    CPU, and a starting server is polled every 50 ms, so a start-up cost the test process
    seconds. `Connection: close`: no connection outlives its probe, so a poll never reaches a
    server through a connection to one that has stopped."""
    return httpx.Client(timeout=1, headers={"Connection": "close"})


def is_live(url: str, process: subprocess.Popen[bytes], what: str) -> bool:
    """Whether `process` answers `GET /health/live` at `url` (it must not have exited)."""
    if process.poll() is not None:
        raise RuntimeError(f"{what} exited with {process.returncode}")
    try:
        return probe().get(url + "/health/live").status_code == 200
    except httpx.TransportError:
        return False


class ManagedProcess:
    """A child process writing to `log`; `stop` sends SIGTERM, then kills after 15 s."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self._log = log.open("ab")
        self.process = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


class LiveProcess(ManagedProcess):
    """A `ManagedProcess` serving HTTP on 127.0.0.1:`port`, started once it is live."""

    what = "process"

    def __init__(
        self, args: list[str], log: Path, *, port: int, env: dict[str, str] | None = None
    ) -> None:
        self.port = port
        super().__init__(args, log, env)
        wait_for(lambda: is_live(self.url, self.process, self.what), what=f"{self.what} to start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


FAILPOINT_SERVE = Path(__file__).parents[1] / "support" / "failpoint_serve.py"


class Serve(LiveProcess):
    """One `mercato serve`, on a free port unless one is given (a restart keeps its address).

    With `failpoints` (comma-separated), the crash suite's test entry instead: the same server
    whose Runtime SIGKILLs the process at those points (tests/support/failpoint_serve.py).
    """

    what = "serve"

    def __init__(
        self, env: dict[str, str], log: Path, port: int | None = None, *, failpoints: str = ""
    ) -> None:
        port = free_port() if port is None else port
        if failpoints:
            args = [sys.executable, str(FAILPOINT_SERVE), "--failpoints", failpoints]
        else:
            args = [sys.executable, "-m", "mercato", "serve"]
        super().__init__([*args, "--port", str(port)], log, port=port, env=env)


class Worker(ManagedProcess):
    """One `mercato worker` running its loops until stopped."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(
            [sys.executable, "-m", "mercato", "worker", "--idle-seconds", "0.1"], log, env
        )


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
