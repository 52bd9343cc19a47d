"""`mercato admin stuck-invocations` and `resolve-invocation` for real, as subprocesses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World, running_world
from builders.invocations import scripted_provider, unknown
from builders.platform_process import mercato as run_mercato
from builders.platform_process import platform_env
from mercato.worker import loops

pytestmark = pytest.mark.functional


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with (
        scripted_provider() as provider,
        running_world(db_url, tmp_path, provider, stuck_after_attempts=1) as built,
    ):
        yield built


def mercato(world: World, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = platform_env(world.runtime.settings.database_url, tmp_path / "cli-data")
    return run_mercato("admin", *args, env=env, timeout=120)


def _stuck_call(world: World) -> str:
    world.provider.script(unknown())
    response = world.invoke({"n": 1})
    assert response.status_code == 202
    world.provider.script_reconciliation(unknown())
    world.clock.advance(3600)
    run_on_fresh_loop(loops.run_once(world.runtime))
    return str(response.json()["invocationId"])


def test_operators_list_and_resolve_a_stuck_call_once(world: World, tmp_path: Path) -> None:
    empty = mercato(world, tmp_path, "stuck-invocations", "--json")
    assert (empty.returncode, json.loads(empty.stdout)) == (0, {"items": []})
    invocation_id = _stuck_call(world)

    listed = mercato(world, tmp_path, "stuck-invocations", "--json")

    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)["items"]
    assert set(item) == {"invocationId", "serviceCode", "version", "acceptedAt", "attempts"}
    assert (item["invocationId"], item["serviceCode"], item["version"], item["attempts"]) == (
        invocation_id,
        "acme.echo",
        "v1",
        1,
    )
    done = mercato(
        world,
        tmp_path,
        "resolve-invocation",
        invocation_id,
        "--succeeded",
        "--reason",
        "ok",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"invocationId": invocation_id, "settlement": "SETTLED"}
    assert world.balances() == (90, 0) and world.earnings() == 7 and world.ledger_balanced()
    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert receipt["resolution"]["decision"] == "SUCCEEDED"

    again = mercato(
        world, tmp_path, "resolve-invocation", invocation_id, "--failed", "--reason", "x"
    )
    assert again.returncode == 1 and again.stdout == ""
    assert "INVOCATION_ALREADY_RESOLVED" in again.stderr
    assert world.balances() == (90, 0) and world.earnings() == 7
    after = mercato(world, tmp_path, "stuck-invocations", "--json")
    assert json.loads(after.stdout) == {"items": []}


def test_bad_arguments_exit_2_naming_them(world: World, tmp_path: Path) -> None:
    invocation_id = _stuck_call(world)
    unknown_id = mercato(
        world, tmp_path, "resolve-invocation", "inv_nope", "--failed", "--reason", "x"
    )
    assert unknown_id.returncode == 2
    assert unknown_id.stderr.strip().splitlines() == [unknown_id.stderr.strip()]
    assert "ID" in unknown_id.stderr and "Traceback" not in unknown_id.stderr
    blank = mercato(
        world, tmp_path, "resolve-invocation", invocation_id, "--failed", "--reason", " "
    )
    assert blank.returncode == 2 and "--reason" in blank.stderr
    assert world.balances() == (90, 10)  # nothing moved
