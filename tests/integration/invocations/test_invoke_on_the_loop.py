"""The invoke route runs on the event loop (issue 20 item 2): no thread-pool hop, and nothing
built per request (the provider client is made once, at start-up, on the serving loop; a
schema's validator once per schema). Both stores."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from builders.invocation_world import World
from builders.invocations import ok
from mercato.core import schema_engine
from mercato.dispatch.port import PerLoopProvider
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


_INVOKE = "/v1/services/acme.echo/versions/v1:invoke"


def _serving_loop() -> tuple[asyncio.AbstractEventLoop, int]:
    return asyncio.get_running_loop(), threading.get_ident()


async def _invoke_watching_the_pool(
    app: FastAPI, limiter: Any, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    """Send one invoke to `app` on this (the serving) loop. The loop's thread pool has no
    token, so a hop to it would wait: the watcher sees a task waiting on the limiter and
    reports the hop instead of waiting with it."""
    outcome: dict[str, Any] = {}
    async with anyio.create_task_group() as group:

        async def call() -> None:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
                outcome["response"] = await http.post(_INVOKE, json=body, headers=headers)
            group.cancel_scope.cancel()

        async def watch() -> None:
            while limiter.statistics().tasks_waiting == 0:
                await anyio.sleep(0.001)  # polls the pool; the call's end cancels it
            outcome["hop"] = True
            group.cancel_scope.cancel()

        group.start_soon(call)
        group.start_soon(watch)
    assert "hop" not in outcome, "the invoke route waited for the thread pool"
    response: httpx.Response = outcome["response"]
    return response


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
    schema_engine.compile_schema.cache_clear()

    with TestClient(app, raise_server_exceptions=False) as client:
        loop, loop_thread = client.portal.call(_serving_loop)
        assert provider.made == 1 and provider.open_on(loop)  # made at start-up, on the loop
        # No thread for the loop's pool: any run_in_threadpool / to_thread hop would wait.
        limiter = client.portal.call(anyio.to_thread.current_default_thread_limiter)
        client.portal.call(setattr, limiter, "total_tokens", 0)

        def invoke(n: int, key: str) -> httpx.Response:
            headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": key}
            return client.portal.call(_invoke_watching_the_pool, app, limiter, {"n": n}, headers)

        answers = []
        for n in range(3):
            world.provider.script(ok({"echo": n}))
            answers.append(invoke(n, f"loop-{n}"))
        replay = invoke(0, "loop-0")
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
        assert schema_engine.compile_schema.cache_info().misses == 2
        assert sum(world.provider.executions.values()) == 3
        client.portal.call(setattr, limiter, "total_tokens", 40)

    assert not provider.open_on(loop)  # closed at shutdown, on its loop
    assert world.balances() == (70, 0) and world.ledger_balanced()
