"""Two `serve` and two `worker` processes on one PostgreSQL under concurrent load, with provider
faults: no double charge, no lost reservation, and every settlement agrees with the provider."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from builders.invocation_world import PRICE, SERVICE, World, build_world
from builders.invocations import Act, defined, ok, retryable, scripted_provider, unknown
from builders.platform_process import Serve, Worker, platform_env, wait_for
from mercato.invocations.models import Invocation
from mercato.ledger import service as ledger

pytestmark = [pytest.mark.functional, pytest.mark.postgres_only]

KEYS = 40
GRANT = 10_000


def _script(seed: int, count: int) -> list[Act]:
    rng = random.Random(seed)
    choices = [
        (40, lambda: ok()),
        (10, lambda: defined(400, "NOPE")),
        (15, lambda: unknown()),
        (10, lambda: unknown(accept=False)),
        (15, lambda: retryable()),
        (10, lambda: Act(drop=True, accept=rng.random() < 0.5)),
    ]
    weights = [w for w, _ in choices]
    return [rng.choices([f for _, f in choices], weights)[0]() for _ in range(count)]


def _pending(world: World) -> int:
    with world.runtime.db.read() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Invocation)
                .where(Invocation.state.not_in(["SUCCEEDED", "FAILED"]))
            )
            or 0
        )


def test_two_serves_two_workers_one_postgres(db_url: str, tmp_path: Path) -> None:
    with scripted_provider() as provider:
        world = build_world(db_url, tmp_path, provider)
        with world.runtime.db.transaction() as session:
            ledger.grant(session, account_id=world.caller_id, amount=GRANT, now=world.clock.now())
        provider.script(*_script(seed=5, count=3 * KEYS))
        env = platform_env(db_url, tmp_path / "data")
        logs = tmp_path
        serves = [Serve(env, logs / f"serve-{i}.log") for i in range(2)]
        workers = [Worker(env, logs / f"worker-{i}.log") for i in range(2)]
        responses: dict[str, list[httpx.Response]] = {}
        lock = threading.Lock()
        try:
            barrier = threading.Barrier(2 * KEYS)

            def call(key: str, url: str) -> None:
                barrier.wait()
                response = httpx.post(
                    f"{url}/v1/services/{SERVICE}/versions/v1:invoke",
                    json={"n": int(key[1:])},
                    headers={"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": key},
                    timeout=60,
                )
                with lock:
                    responses.setdefault(key, []).append(response)

            threads = [
                threading.Thread(target=call, args=(f"k{i}", serve.url))
                for i in range(KEYS)
                for serve in serves
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            wait_for(lambda: _pending(world) == 0, what="every call to settle", timeout=120)
        finally:
            for process in [*serves, *workers]:
                process.stop()

        for key, answers in responses.items():
            assert {r.status_code for r in answers} <= {200, 202, 409, 422, 502}, key
            bodies = {r.content for r in answers if r.status_code == 200}
            assert len(bodies) <= 1, key  # every 200 for one key is the same stored result

        with world.runtime.db.read() as session:
            rows = session.execute(select(Invocation.id, Invocation.settlement)).all()
        assert len(rows) == KEYS  # one call intent per key, whichever server took it
        settled = 0
        for invocation_id, settlement in rows:
            key = f"mercato:{invocation_id}"
            assert provider.business[key] <= 1
            stored = provider.store.get(key)
            provider_succeeded = stored is not None and stored[1] == 200
            assert (settlement == "SETTLED") == provider_succeeded, invocation_id
            settled += settlement == "SETTLED"
        assert world.reservations("HELD") == 0
        assert world.reservations("SETTLED") == settled
        assert world.balances() == (100 + GRANT - PRICE * settled, 0)
        assert world.ledger_balanced()
        world.provider_client.close()
        world.runtime.db.dispose()
