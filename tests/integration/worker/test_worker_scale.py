"""The worker at scale (issue 20, item 4; decision 0340): many calls at once, bounded; a slow
provider holds only its own calls; workers side by side share the work without double sends;
a stop lets the steps in flight finish."""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import SERVICE, World, running_world
from builders.invocations import Act, ScriptedProvider, envelope, scripted_provider, unknown
from builders.platform_process import Worker as WorkerProcess
from builders.platform_process import platform_env, wait_for
from builders.worker_world import (
    WaveProvider,
    accept_unsent,
    add_service,
    grant,
    worker_running,
)
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.invocations.models import Invocation
from mercato.worker import loops

# Quotas are not what these tests are about: room for every call they make.
ROOMY = {"default_quota_limit": 100_000, "provider_timeout_seconds": 30.0}


def _states(world: World) -> dict[str, Invocation]:
    return {call.id: call for call in world.invocations()}


def _settled(world: World, ids: list[str]) -> bool:
    calls = _states(world)
    return all(calls[i].state == "SUCCEEDED" and calls[i].settlement == "SETTLED" for i in ids)


def _unknown_calls(world: World, count: int, *, service: str = SERVICE) -> list[str]:
    """`count` calls whose first answer was UNKNOWN_OUTCOME (the provider did the work and
    stored the result): each settles on its first reconciliation."""
    provider = world.provider
    ids = []
    for i in range(count):
        provider.script(unknown())
        response = world.invoke({"n": i}, key=f"{service}-{i}", service=service)
        assert response.status_code == 202, response.text
        ids.append(str(response.json()["invocationId"]))
    return ids


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, worker_concurrency=4, **ROOMY) as built:
        grant(built, 10_000)
        yield built


def test_a_slow_provider_holds_only_its_own_call(world: World) -> None:
    with scripted_provider() as slow:
        add_service(world, slow, "acme.slow")
        slow.script(unknown())
        held = world.invoke({"n": 0}, key="slow", service="acme.slow")
        assert held.status_code == 202, held.text
        slow_id = str(held.json()["invocationId"])
        world.clock.advance(1)  # the slow call is due first: the pass claims it first
        fast = _unknown_calls(world, 10)
        gate, arrived = threading.Event(), threading.Event()
        stored = envelope("SUCCEEDED", result={"echo": {"n": 0}})
        slow.script_reconciliation(Act(200, stored, gate=gate, arrived=arrived))
        world.clock.advance(3600)

        # One pass, 4 steps at once: the slow reconciliation holds one slot while the other
        # three work through the ten fast calls, claiming again as each ends.
        worked: list[int] = []
        worker = threading.Thread(
            target=lambda: worked.append(run_on_fresh_loop(loops.reconcile_once(world.runtime)))
        )
        worker.start()
        try:
            assert arrived.wait(30), "the slow provider was never asked"
            # Well inside the hold (the provider's and the client's 30 s): a worker that let
            # the slow call block the others would time out here.
            wait_for(lambda: _settled(world, fast), what="the fast calls to settle", timeout=20)
            assert worker.is_alive() and not gate.is_set()  # the slow step is still in flight
            assert _states(world)[slow_id].state == "RECONCILING"
        finally:
            gate.set()
            worker.join(60)
    assert worked == [11]
    assert _settled(world, [slow_id, *fast])
    assert slow.reconciliations[world.provider_key(slow_id)] == 1
    assert all(world.provider.reconciliations[world.provider_key(i)] == 1 for i in fast)
    assert world.balances() == (10_100 - 110, 0) and world.ledger_balanced()


def test_a_lane_runs_as_many_steps_at_once_as_its_slots_and_no_more(
    db_url: str, tmp_path: Path
) -> None:
    width, calls = 4, 12
    provider = WaveProvider(width, expected=calls)
    provider.start()
    try:
        with running_world(db_url, tmp_path, provider, worker_concurrency=width, **ROOMY) as world:
            grant(world, 1_000)
            # Over two connections: one alone may hold only its share of the lane (0513).
            add_service(world, provider, "acme.twin")
            ids = [
                call
                for pair in zip(
                    _unknown_calls(world, calls // 2),
                    _unknown_calls(world, calls // 2, service="acme.twin"),
                    strict=True,
                )
                for call in pair
            ]
            world.clock.advance(3600)

            assert run_on_fresh_loop(loops.reconcile_once(world.runtime)) == calls

            assert provider.most == width  # the slots were used, and never exceeded
            assert provider.arrived == calls
            assert _settled(world, ids) and world.ledger_balanced()
    finally:
        provider.stop()


def test_two_workers_side_by_side_conclude_every_call_once(world: World) -> None:
    count = 60
    ids = accept_unsent(world, count)  # a serve process died after accepting them
    world.clock.advance(31)  # its leases have run out: both workers may take them over
    settings = world.runtime.settings
    other_client = ProviderClient(settings)
    # A second worker with its own engine and connections, as a second process would have.
    other = Runtime.from_settings(settings, clock=world.clock, provider=other_client)
    try:
        with worker_running(world.runtime), worker_running(other):
            wait_for(lambda: _settled(world, ids), what="every call to settle", timeout=120)
    finally:
        other_client.close()
        other.db.dispose()

    _each_concluded_once(world, ids)


def test_two_worker_processes_conclude_every_call_once(world: World, tmp_path: Path) -> None:
    count = 60
    ids = accept_unsent(world, count, lease_seconds=3600)  # a serve process died after accepting
    env = platform_env(
        world.runtime.settings.resolved_database_url,
        tmp_path / "worker-data",
        MERCATO_WORKER_CONCURRENCY="4",
        MERCATO_PROVIDER_TIMEOUT_SECONDS="30",
    )
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    workers = [WorkerProcess(env, log) for log in logs]
    try:
        for log in logs:
            wait_for(functools.partial(_started, log), what="a worker to start")
        # Both are polling: the dead process's leases run out now (in real time).
        with world.runtime.db.transaction() as session:
            session.execute(
                update(Invocation)
                .where(Invocation.lease_owner == "dead-process")
                .values(lease_expires_at=utcnow() - dt.timedelta(seconds=1))
            )
        wait_for(lambda: _settled(world, ids), what="every call to settle", timeout=180)
    finally:
        for worker in workers:
            worker.stop()
    assert all(worker.process.returncode == 0 for worker in workers)  # a clean SIGTERM stop
    _each_concluded_once(world, ids)
    # Each call was worked by one worker only, and both took their share.
    worked = [_calls_in(log) for log in logs]
    assert worked[0] | worked[1] == set(ids) and not worked[0] & worked[1]
    assert worked[0] and worked[1]


def _started(log: Path) -> bool:
    return "worker started" in log.read_text()


def _calls_in(log: Path) -> set[str]:
    """The calls a worker's JSON log lines name."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return {line["invocation_id"] for line in lines if "invocation_id" in line}


def _each_concluded_once(world: World, ids: list[str]) -> None:
    for invocation_id in ids:
        key = world.provider_key(invocation_id)
        # Asked once ("never accepted"), then sent once: nothing was done twice.
        assert world.provider.reconciliations[key] == 1, key
        assert world.provider.executions[key] == 1, key
        assert world.provider.business[key] == 1, key
    assert world.reservations("SETTLED") == len(ids)
    assert world.balances() == (10_100 - 10 * len(ids), 0) and world.ledger_balanced()


def test_a_stopped_worker_lets_its_steps_in_flight_finish(world: World) -> None:
    [invocation_id] = _unknown_calls(world, 1)
    gate, arrived = threading.Event(), threading.Event()
    stored = envelope("SUCCEEDED", result={"echo": {"n": 0}})
    world.provider.script_reconciliation(Act(200, stored, gate=gate, arrived=arrived))
    world.clock.advance(3600)
    with worker_running(world.runtime) as stop:
        assert arrived.wait(30)
        stop.set()  # while the reconciliation is held
        gate.set()
    # `run_forever` returned only after the step in flight had concluded the call.
    assert _settled(world, [invocation_id])
    assert world.provider.reconciliations[world.provider_key(invocation_id)] == 1
    assert world.ledger_balanced()
