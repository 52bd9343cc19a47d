"""The leanest path (bench/leanest.py) never sends a call on a connection its provider is closing.

The bench's providers run on uvicorn, which closes a keep-alive connection after 5 s idle, and
the measurements are spaced so that a client's connection to them sits idle for about that long
(the leanest path's, between its two-client and one-client runs: 4.6-4.8 s). Kept for 5 s by the
client too, a connection idle for just under 5 s was reused as the provider closed it: the call
reset unanswered, which the leanest path answers 202 and leaves DISPATCHING for a worker the
bench does not run, and the run's ledger check failed (decision 0500). The pool's own clock
(aiohttp's) is moved by hand: no waiting."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import aiohttp
import pytest

from builders.listeners import keep_alive, listener

ROOT = Path(__file__).parents[3]
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


_keep_alive = keep_alive(ANSWER)


@pytest.mark.parametrize(
    ("idle", "connections"), [(3.9, 1), (4.99, 2)], ids=["reused", "dropped-before-5s"]
)
def test_the_leanest_paths_pool_drops_a_connection_before_the_provider_would(
    monkeypatch: pytest.MonkeyPatch, idle: float, connections: int
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    leanest = importlib.import_module("bench.leanest")
    clock = [1000.0]
    monkeypatch.setattr(aiohttp.connector, "monotonic", lambda: clock[0])

    async def two(url: str) -> list[int]:
        statuses = []
        async with leanest.provider_session(5.0) as session:
            for _ in range(2):
                async with session.post(url + "/v1/executions", data=b"{}") as response:
                    await response.read()
                    statuses.append(response.status)
                clock[0] += idle
        return statuses

    with listener(_keep_alive) as provider:
        assert asyncio.run(two(provider.url)) == [200, 200]
        assert provider.count() == connections
