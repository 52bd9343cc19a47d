"""No schema, body or result can hold the serving loop (issue 39 item 1): the worst schemas we
could build, as request and as result schemas, are invoked at once through uvicorn on a real
loop while `/health/live` is probed. Both stores.

Synchronisation is by what the engine reports, not by time: a probe counts only when one same
judgement (`schema_engine.judgements_in_flight`, each numbered once) was running from before
the probe was sent until after it was answered. On a loop that judges in place no probe can be
answered while a judgement runs."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import select

from builders.catalog import example_contract, publish
from builders.hard_schemas import HARD_SCHEMAS, JUDGED, TOO_COMPLEX, hard_instance
from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider, ServerThread, ok
from mercato.core import schema_engine
from mercato.providers.models import ProviderConnection
from mercato.web.app import create_app

PROBES_WHILE_JUDGING = 5


@pytest.fixture
def slow_world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    # A long deadline: each judgement that cannot finish runs for 1.5 s of CPU time, so the
    # probes have a long window in which a judgement is surely running.
    with running_world(db_url, tmp_path, provider, validation_deadline_ms=1500) as built:
        yield built


def _publish_all(world: World) -> list[str]:
    with world.runtime.db.read() as session:
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    services = []
    for name, build in HARD_SCHEMAS.items():
        for side in ("request", "result"):
            service = f"hard.{side}-{name}"
            publish(
                world.runtime,
                connection_id,
                service_code=service,
                price=1,
                contract=example_contract(
                    requestMaxBytes=65_536,
                    responseMaxBytes=1_048_576,
                    requestSchema=build() if side == "request" else {"type": "object"},
                    resultSchema=build() if side == "result" else {"type": "object"},
                    artifactContract=None,
                ),
            )
            services.append(service)
    return services


def test_the_worst_schemas_never_keep_health_live_waiting(slow_world: World) -> None:
    world = slow_world
    services = _publish_all(world)
    body = orjson.dumps(hard_instance())
    results = [s for s in services if s.startswith("hard.result-")]
    world.provider.script(*(ok(hard_instance()) for _ in results))

    with ServerThread(create_app(world.runtime)) as server:

        def invoke(service: str) -> tuple[str, int, str]:
            headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": service}
            with httpx.Client(base_url=server.url, timeout=120) as http:
                response = http.post(
                    f"/v1/services/{service}/versions/v1:invoke", content=body, headers=headers
                )
            return service, response.status_code, response.json().get("code", "")

        with ThreadPoolExecutor(len(services)) as pool:
            calls = [pool.submit(invoke, service) for service in services]
            probes_while_judging = 0
            with httpx.Client(base_url=server.url, timeout=60) as probe:
                while not all(call.done() for call in calls):
                    before = schema_engine.judgements_in_flight()
                    answer = probe.get("/health/live")
                    assert answer.status_code == 200
                    if before & schema_engine.judgements_in_flight():
                        probes_while_judging += 1
            answers = sorted(call.result() for call in calls)

    assert probes_while_judging >= PROBES_WHILE_JUDGING
    expected = []
    for name in HARD_SCHEMAS:
        request = "REQUEST_TOO_COMPLEX" if name in TOO_COMPLEX else "REQUEST_SCHEMA_VIOLATION"
        assert name in JUDGED or name in TOO_COMPLEX
        expected.append((f"hard.request-{name}", 422, request))
        expected.append((f"hard.result-{name}", 502, "PROVIDER_CONTRACT_VIOLATION"))
    assert answers == sorted(expected)
    # Nothing consumed by the refused bodies; every result violation released.
    assert world.balances() == (100, 0) and world.earnings() == 0
    assert world.ledger_balanced()
