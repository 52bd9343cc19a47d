"""Bulkheads between providers (issue 39 item 2, DESIGN §7, decisions 0510-0514), through a
real uvicorn serving the app and real loopback providers, on both stores.

- A flood of slow calls to one provider, past the old shared pool of 100 connections, does not
  delay, time out or turn unknown a call to another provider.
- A call that finds its connection full (or the process full) is refused before acceptance:
  503 PROVIDER_BUSY with Retry-After and retryAfter; no quota slot, no points, no key taken,
  and the same Idempotency-Key works once a slot is free. Not enough points still answers 402
  first (DESIGN §3's order).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.accounts import make_account, make_api_key
from builders.invocation_world import SERVICE, World, running_world
from builders.invocations import Act, ScriptedProvider, ServerThread, ok, scripted_provider
from builders.worker_world import add_service, grant
from mercato.invocations import spend
from mercato.ledger import service as ledger

SLOW = "acme.slow"
INVOKE = "/v1/services/{service}/versions/v1:invoke"
OLD_POOL = 100  # connections the provider client's pool used to share between all providers
FLOOD = OLD_POOL + 10


def _gated(gate: threading.Event) -> Act:
    """A call the provider holds until `gate` is set; `arrived` is set once it is in."""
    act = ok({"echo": "slow"})
    act.gate, act.arrived = gate, threading.Event()
    return act


def _post(
    client: httpx.Client, world: World, *, service: str, key: str, api_key: str | None = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key or world.api_key}", "Idempotency-Key": key}
    return client.post(INVOKE.format(service=service), json={"n": 1}, headers=headers)


class Flood:
    """`count` calls to `service` sent at once from a thread of their own (one event loop),
    each held by the provider until `gate` is set."""

    def __init__(self, url: str, world: World, service: str, count: int) -> None:
        self.url, self.world, self.service, self.count = url, world, service, count
        self.answers: list[httpx.Response] = []
        self.thread = threading.Thread(target=lambda: asyncio.run(self._send()), name="flood")

    async def _send(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=self.url, timeout=120, limits=limits) as http:

            async def one(i: int) -> httpx.Response:
                headers = {
                    "Authorization": f"Bearer {self.world.api_key}",
                    "Idempotency-Key": f"flood-{i}",
                }
                return await http.post(
                    INVOKE.format(service=self.service), json={"n": i}, headers=headers
                )

            self.answers = list(await asyncio.gather(*(one(i) for i in range(self.count))))

    def __enter__(self) -> Flood:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.thread.join(120)


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    settings: dict[str, Any] = {
        "default_quota_limit": 100_000,
        "provider_max_in_flight": 128,
        # Generous: the held calls must not time out while the flood is still arriving.
        "provider_timeout_seconds": 30.0,
    }
    with running_world(db_url, tmp_path, provider, **settings) as built:
        grant(built, 10_000)
        yield built


@pytest.fixture
def slow(world: World) -> Iterator[ScriptedProvider]:
    with scripted_provider() as provider:
        add_service(world, provider, SLOW)
        yield provider


def _served(world: World) -> ServerThread:
    return ServerThread(world.client.app)


def test_a_flood_of_slow_calls_never_delays_a_call_to_another_provider(
    world: World, slow: ScriptedProvider
) -> None:
    gate = threading.Event()
    acts = [_gated(gate) for _ in range(FLOOD)]
    slow.script(*acts)
    with (
        _served(world) as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
        Flood(server.url, world, SLOW, FLOOD) as flood,
    ):
        try:
            # As many slow calls at the provider, held there, as the old shared pool had
            # connections in all (the script's acts are taken in order of arrival).
            for act in acts[:OLD_POOL]:
                assert act.arrived is not None and act.arrived.wait(60)

            answer = _post(http, world, service=SERVICE, key="neighbour")

            # Settled on its first answer: not 202, not reconciling, not timed out.
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"] == {"echo": {"n": 1}}
            # And every slow call got a connection of its own too.
            for act in acts[OLD_POOL:]:
                assert act.arrived is not None and act.arrived.wait(60)
            assert world.runtime.slots.in_flight() == FLOOD
            assert not gate.is_set() and len(flood.answers) == 0
        finally:
            gate.set()
    assert [a.status_code for a in flood.answers] == [200] * FLOOD
    neighbour = [c for c in world.invocations() if c.idempotency_key == "neighbour"]
    assert [(c.state, c.settlement, c.sends) for c in neighbour] == [("SUCCEEDED", "SETTLED", 1)]
    assert world.runtime.slots.in_flight() == 0
    assert world.ledger_balanced()


def _rate_limit(http: httpx.Client, world: World) -> Any:
    got = http.get("/v1/rate-limit", headers={"Authorization": f"Bearer {world.api_key}"})
    assert got.status_code == 200, got.text
    return got.json()


def _set_own_limit(world: World, service_code: str, limit: int) -> None:
    from mercato.catalog import service as catalog
    from mercato.providers import service as providers

    with world.runtime.db.transaction() as session:
        version = catalog.get_invocable_version(session, service_code=service_code, version="v1")
        providers.set_max_in_flight(
            session,
            connection_id=version.connection_id,
            max_in_flight=limit,
            settings=world.runtime.settings,
            now=world.clock.now(),
        )


def test_a_full_connection_refuses_before_acceptance_and_consumes_nothing(
    world: World, slow: ScriptedProvider
) -> None:
    _set_own_limit(world, SLOW, 1)
    gate = threading.Event()
    held = _gated(gate)
    with _served(world) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        warm = _post(http, world, service=SLOW, key="warm")  # the process's memory is warm
        assert warm.status_code == 200, warm.text
        slow.script(held)
        with Flood(server.url, world, SLOW, 1) as flood:
            try:
                assert held.arrived is not None and held.arrived.wait(60)
                before = (world.balances(), _rate_limit(http, world), len(world.invocations()))

                refused = [_post(http, world, service=SLOW, key="busy") for _ in range(3)]

                for answer in refused:
                    assert answer.status_code == 503, answer.text
                    problem = answer.json()
                    assert problem["code"] == "PROVIDER_BUSY"
                    assert answer.headers["content-type"].startswith("application/problem+json")
                    assert answer.headers["Retry-After"] == "1" and problem["retryAfter"] == 1
                after = (world.balances(), _rate_limit(http, world), len(world.invocations()))
                assert after == before  # no points, no quota slot, no call, no key
                # The other provider is not affected by this one being full.
                assert _post(http, world, service=SERVICE, key="other").status_code == 200
            finally:
                gate.set()
        assert [a.status_code for a in flood.answers] == [200]

        again = _post(http, world, service=SLOW, key="busy")  # the same key, now free

        assert again.status_code == 200, again.text
    busy = [c for c in world.invocations() if c.idempotency_key == "busy"]
    assert [(c.state, c.settlement) for c in busy] == [("SUCCEEDED", "SETTLED")]
    assert world.runtime.slots.in_flight() == 0 and world.ledger_balanced()


def test_not_enough_points_answers_before_a_full_connection(
    world: World, slow: ScriptedProvider
) -> None:
    _set_own_limit(world, SLOW, 1)
    poor_id = make_account(world.runtime.db, "poor@example.com", password=None)
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=poor_id, amount=3, now=world.clock.now())
    poor_key, _ = make_api_key(world.runtime.db, poor_id)
    gate = threading.Event()
    held = _gated(gate)
    slow.script(held)
    with (
        _served(world) as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
        Flood(server.url, world, SLOW, 1),
    ):
        try:
            assert held.arrived is not None and held.arrived.wait(60)

            answer = _post(http, world, service=SLOW, key="poor", api_key=poor_key)

            assert answer.status_code == 402, answer.text
            assert answer.json()["code"] == "INSUFFICIENT_POINTS"
        finally:
            gate.set()
    assert world.balances(poor_id) == (3, 0)


def test_the_keys_spend_limit_answers_before_a_full_connection(
    world: World, slow: ScriptedProvider
) -> None:
    _set_own_limit(world, SLOW, 1)
    limited_key, key_id = make_api_key(world.runtime.db, world.caller_id, name="agent")
    with world.runtime.db.transaction() as session:
        spend.set_limit(
            session,
            key_id=key_id,
            account_id=None,
            limit=(1, spend.Period.DAY),
            now=world.clock.now(),
        )
    gate = threading.Event()
    held = _gated(gate)
    slow.script(held)
    with (
        _served(world) as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
        Flood(server.url, world, SLOW, 1),
    ):
        try:
            assert held.arrived is not None and held.arrived.wait(60)

            answer = _post(http, world, service=SLOW, key="limited", api_key=limited_key)

            assert answer.status_code == 402, answer.text
            assert answer.json()["code"] == "KEY_SPEND_LIMIT_REACHED"
            assert answer.json()["limit"] == 1
        finally:
            gate.set()


def test_the_process_cap_refuses_a_call_to_any_connection(
    db_url: str, tmp_path: Path, provider: ScriptedProvider
) -> None:
    settings = {"default_quota_limit": 1000, "max_in_flight": 1}
    with (
        running_world(db_url, tmp_path, provider, **settings) as world,
        scripted_provider() as slow,
    ):
        grant(world, 1000)
        add_service(world, slow, SLOW)
        gate = threading.Event()
        held = _gated(gate)
        slow.script(held)
        with _served(world) as server, httpx.Client(base_url=server.url, timeout=60) as http:
            with Flood(server.url, world, SLOW, 1) as flood:
                try:
                    assert held.arrived is not None and held.arrived.wait(60)

                    refused = _post(http, world, service=SERVICE, key="elsewhere")

                    assert refused.status_code == 503, refused.text
                    assert refused.json()["code"] == "PROVIDER_BUSY"
                    assert refused.json()["retryAfter"] == int(refused.headers["Retry-After"])
                finally:
                    gate.set()
            assert [a.status_code for a in flood.answers] == [200]
            assert _post(http, world, service=SERVICE, key="elsewhere").status_code == 200
        assert [c.idempotency_key for c in world.invocations()].count("elsewhere") == 1
        assert world.ledger_balanced()
