"""`/health/live` on the event loop, `/health/ready` with a bounded database check
(issue 23 item 4, decision 0272), over real loopback HTTP, on both stores."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio.to_thread
import httpx
import pytest

from builders.invocations import ServerThread
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app

POOL_TOKENS = 4


class Gate:
    """Requests that park in the thread pool until released; counts those inside."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._inside = 0
        self._changed = threading.Condition()

    def enter(self) -> None:
        with self._changed:
            self._inside += 1
            self._changed.notify_all()
        assert self.release.wait(60), "the test never released the parked requests"

    def wait_inside(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self._inside >= count, timeout=60)


@pytest.fixture
def saturated(runtime: Runtime) -> Iterator[tuple[str, Gate]]:
    """A real server whose every thread-pool token is held by a parked request."""
    app = create_app(runtime)
    gate = Gate()

    @app.post("/test/pool-size")
    async def pool_size() -> dict[str, int]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = POOL_TOKENS
        return {"tokens": int(limiter.total_tokens)}

    @app.get("/test/park")
    def park() -> dict[str, str]:  # a sync route: holds a thread-pool token while parked
        gate.enter()
        return {"status": "released"}

    @app.get("/test/borrowed")
    async def borrowed() -> dict[str, int]:
        return {"borrowed": int(anyio.to_thread.current_default_thread_limiter().borrowed_tokens)}

    with ServerThread(app) as server, ThreadPoolExecutor(POOL_TOKENS + 1) as pool:
        assert httpx.post(f"{server.url}/test/pool-size").json() == {"tokens": POOL_TOKENS}
        parked = [
            pool.submit(httpx.get, f"{server.url}/test/park", timeout=60)
            for _ in range(POOL_TOKENS + 1)  # one more than the pool: it queues
        ]
        gate.wait_inside(POOL_TOKENS)
        assert httpx.get(f"{server.url}/test/borrowed").json() == {"borrowed": POOL_TOKENS}
        try:
            yield server.url, gate
        finally:
            gate.release.set()
            assert all(f.result().status_code == 200 for f in parked)


def test_live_answers_while_the_thread_pool_is_saturated(saturated: tuple[str, Gate]) -> None:
    url, gate = saturated
    response = httpx.get(f"{url}/health/live", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert not gate.release.is_set()  # still saturated while it answered


def test_ready_checks_the_database_outside_the_saturated_pool(
    saturated: tuple[str, Gate],
) -> None:
    url, _ = saturated
    response = httpx.get(f"{url}/health/ready", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.fixture
def silent_database() -> Iterator[int]:
    """A TCP port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def test_ready_is_503_when_the_database_never_answers(silent_database: int, tmp_path: Path) -> None:
    settings = Settings(
        env="dev",
        data_dir=tmp_path,
        database_url=f"postgresql://mercato@127.0.0.1:{silent_database}/mercato",
        ready_timeout_seconds=0.2,
    )
    runtime = Runtime.from_settings(settings)
    with ServerThread(create_app(runtime)) as server:
        first = httpx.get(f"{server.url}/health/ready", timeout=30)
        assert first.status_code == 503
        assert first.headers["content-type"].startswith("application/problem+json")
        assert first.json()["code"] == "SERVICE_UNAVAILABLE"
        assert "did not answer" in first.json()["message"]
        # The first check is still stuck: the next probe does not start another thread.
        second = httpx.get(f"{server.url}/health/ready", timeout=30)
        assert second.status_code == 503
        assert "has not returned" in second.json()["message"]
        assert httpx.get(f"{server.url}/health/live", timeout=30).status_code == 200
    runtime.db.dispose()


def test_ready_is_503_when_the_database_refuses(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    settings = Settings(
        env="dev", data_dir=tmp_path, database_url=f"postgresql://mercato@127.0.0.1:{port}/x"
    )
    runtime = Runtime.from_settings(settings)
    with ServerThread(create_app(runtime)) as server:
        response = httpx.get(f"{server.url}/health/ready", timeout=30)
        assert response.status_code == 503
        assert response.json()["message"] == "The database is not reachable."
    runtime.db.dispose()
