"""Fifty concurrent invokes with one key: one execution, one reservation, one settlement."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider, ServerThread, ok


@pytest.fixture
def slow_world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, provider_timeout_seconds=30.0) as built:
        yield built


def test_fifty_concurrent_invokes_with_one_key(slow_world: World) -> None:
    world = slow_world
    gate = threading.Event()
    world.provider.script(_gated(gate))
    barrier = threading.Barrier(50)
    responses: list[httpx.Response] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": "storm"}

    with ServerThread(world.client.app) as server:

        def call() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                barrier.wait()
                response = http.post(
                    "/v1/services/acme.echo/versions/v1:invoke", json={"n": 5}, headers=headers
                )
            with lock:
                responses.append(response)

        threads = [threading.Thread(target=call) for _ in range(50)]
        for thread in threads:
            thread.start()
        # Every request but the one holding the lease is answered while the provider works.
        deadline = time.monotonic() + 60
        while len(responses) < 49 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(responses) == 49
        assert {r.status_code for r in responses} == {409}
        assert all(r.json()["code"] == "IDEMPOTENCY_KEY_IN_USE" for r in responses)
        assert all(int(r.headers["Retry-After"]) >= 1 for r in responses)
        gate.set()
        for thread in threads:
            thread.join(60)
        replay = httpx.post(
            server.url + "/v1/services/acme.echo/versions/v1:invoke",
            json={"n": 5},
            headers=headers,
        )

    winners = [r for r in responses if r.status_code == 200]
    assert len(winners) == 1 and len(responses) == 50
    assert replay.status_code == 200 and replay.content == winners[0].content
    assert sum(world.provider.executions.values()) == 1
    assert sum(world.provider.business.values()) == 1
    assert len(world.invocations()) == 1
    assert world.reservations("SETTLED") == 1 and world.reservations("HELD") == 0
    assert world.balances() == (90, 0)
    assert world.ledger_balanced()


def _gated(gate: threading.Event):  # type: ignore[no-untyped-def]
    act = ok({"echo": "once"})
    act.gate = gate
    return act
