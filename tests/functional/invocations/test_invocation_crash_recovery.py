"""Crash recovery with real processes: the platform server SIGKILLs itself at a failpoint (its
Runtime built with them by tests/support/failpoint_serve.py), then the worker brings the call
to exactly one terminal settlement that agrees with the provider's records."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from builders.invocation_world import SERVICE, World, build_world
from builders.invocations import ScriptedProvider, scripted_provider
from builders.platform_process import Serve, mercato, platform_env, wait_for
from mercato.invocations.models import Invocation

pytestmark = pytest.mark.functional


@pytest.fixture
def setup(db_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    with scripted_provider() as provider:
        world = build_world(db_url, tmp_path, provider)
        yield world, provider
        world.provider_client.close()
        world.runtime.db.dispose()


def _terminal(world: World) -> str | None:
    """The settlement once the call is terminal, else None."""
    with world.runtime.db.read() as session:
        row = session.execute(select(Invocation.state, Invocation.settlement)).one_or_none()
    if row is not None and row[0] in ("SUCCEEDED", "FAILED"):
        return str(row[1])
    return None


def _work_until_terminal(world: World, env: dict[str, str]) -> str:
    """Run worker passes (real processes) until the call is terminal; bounded by a deadline."""

    def step() -> str | None:
        done = _terminal(world)
        if done is None:
            ran = mercato("worker", "--once", env=env)
            assert ran.returncode == 0, ran.stderr
        return done

    settled: str = wait_for(step, what="a terminal settlement", timeout=90)
    return settled


@pytest.mark.parametrize("point", ["after-accept", "after-send", "before-settle"])
def test_sigkill_at_failpoint_then_worker_settles_once(
    setup: tuple[World, ScriptedProvider], db_url: str, tmp_path: Path, point: str
) -> None:
    world, provider = setup
    env = platform_env(db_url, tmp_path / "data")
    headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": "crash-key"}
    path = f"/v1/services/{SERVICE}/versions/v1:invoke"

    doomed = Serve(env, tmp_path / "serve-1.log", failpoints=point)
    with pytest.raises(httpx.HTTPError):
        httpx.post(doomed.url + path, json={"n": 3}, headers=headers, timeout=30)
    assert doomed.process.wait(30) == -signal.SIGKILL
    doomed.stop()

    with world.runtime.db.read() as session:
        ((invocation_id, state, settlement),) = session.execute(
            select(Invocation.id, Invocation.state, Invocation.settlement)
        ).all()
    key = f"mercato:{invocation_id}"
    assert (state, settlement) == ("DISPATCHING", "PENDING")
    assert provider.executions[key] == (0 if point == "after-accept" else 1)
    assert world.balances() == (90, 10)

    # Restart: the platform answers the caller's retry; the worker finishes the call.
    serve = Serve(env, tmp_path / "serve-2.log")
    try:
        final = _work_until_terminal(world, env)
        replay = httpx.post(serve.url + path, json={"n": 3}, headers=headers, timeout=30)
    finally:
        serve.stop()

    assert final == "SETTLED"  # the provider holds a success for this key
    assert provider.business[key] == 1 and provider.executions[key] == 1
    assert provider.reconciliations[key] >= 1  # never resent before asking
    assert replay.status_code == 200 and replay.json()["result"] == {"echo": {"n": 3}}
    assert world.balances() == (90, 0)
    assert world.reservations("HELD") == 0
    report = mercato("admin", "verify-ledger", "--json", env=env)
    assert report.returncode == 0 and json.loads(report.stdout)["balanced"] is True
