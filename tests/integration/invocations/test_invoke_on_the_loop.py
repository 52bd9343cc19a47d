"""The invoke route runs on the event loop (issue 20 item 2): no thread-pool hop, and nothing
built per request (the provider client is made once, at start-up, on the serving loop; a
schema's validator once per schema). Both stores."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import dataclass, field

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from builders.invocation_world import World
from builders.invocations import ok
from mercato.dispatch.port import PerLoopProvider
from mercato.invocations import flows
from mercato.web.app import create_app


@dataclass
class Where:
    """Failpoints that note, for each engine point reached, the thread and the running loop."""

    seen: list[tuple[str, int, asyncio.AbstractEventLoop | None]] = field(default_factory=list)

    def hit(self, point: str) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a worker thread of the pool runs no loop
            loop = None
        self.seen.append((point, threading.get_ident(), loop))


def _serving_loop() -> tuple[asyncio.AbstractEventLoop, int]:
    return asyncio.get_running_loop(), threading.get_ident()


@pytest.mark.timeout(120)  # a thread-pool hop blocks on the held token: fail, do not hang
def test_the_invoke_runs_on_the_serving_loop_and_builds_nothing_per_request(
    world: World,
) -> None:
    where = Where()
    # A runtime without an async provider client: the app makes its own at start-up.
    runtime = dataclasses.replace(world.runtime, failpoints=where, async_provider=None)
    app = create_app(runtime)
    provider = runtime.async_provider
    assert isinstance(provider, PerLoopProvider)
    assert provider.made == 0  # nothing is opened before the loop runs
    flows._validator.cache_clear()

    with TestClient(app, raise_server_exceptions=False) as client:
        loop, loop_thread = client.portal.call(_serving_loop)
        assert provider.made == 1 and provider.open_on(loop)  # made at start-up, on the loop
        # Saturate the loop's thread pool: its only token is held for the whole test, so any
        # run_in_threadpool / to_thread hop would wait for ever instead of answering.
        limiter = client.portal.call(anyio.to_thread.current_default_thread_limiter)
        client.portal.call(setattr, limiter, "total_tokens", 1)
        holder = object()
        client.portal.call(limiter.acquire_on_behalf_of_nowait, holder)
        assert limiter.available_tokens == 0

        headers = {"Authorization": f"Bearer {world.api_key}"}
        answers = []
        for n in range(3):
            world.provider.script(ok({"echo": n}))
            answers.append(
                client.post(
                    "/v1/services/acme.echo/versions/v1:invoke",
                    json={"n": n},
                    headers={**headers, "Idempotency-Key": f"loop-{n}"},
                )
            )
        replay = client.post(
            "/v1/services/acme.echo/versions/v1:invoke",
            json={"n": 0},
            headers={**headers, "Idempotency-Key": "loop-0"},
        )
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert [a.json()["result"] for a in answers] == [{"echo": 0}, {"echo": 1}, {"echo": 2}]
        assert answers[0].headers["RateLimit-Policy"]  # the quota read on the loop too
        assert replay.status_code == 200 and replay.json() == answers[0].json()

        # Every point of every call ran on the serving loop's own thread.
        points = [point for point, _, _ in where.seen]
        assert points == ["before-accept", "after-accept", "after-send", "before-settle"] * 3
        assert {(thread, seen) for _, thread, seen in where.seen} == {(loop_thread, loop)}
        # Made once: one provider client for the process's loop, one validator per schema
        # (the request's and the result's), whatever the number of calls.
        assert provider.made == 1
        assert flows._validator.cache_info().misses == 2
        assert sum(world.provider.executions.values()) == 3
        client.portal.call(limiter.release_on_behalf_of, holder)

    assert not provider.open_on(loop)  # closed at shutdown, on its loop
    assert world.balances() == (70, 0) and world.ledger_balanced()
