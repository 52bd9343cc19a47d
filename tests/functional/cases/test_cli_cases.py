"""`mercato admin decide-dispute` / `decide-report` for real, as subprocesses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.cases import CaseWorld, add_people
from builders.invocation_world import build_world
from builders.invocations import scripted_provider
from builders.platform_process import mercato as run_mercato
from builders.platform_process import platform_env

pytestmark = pytest.mark.functional


@pytest.fixture
def cw(db_url: str, tmp_path: Path) -> Iterator[CaseWorld]:
    with scripted_provider() as provider:
        world = build_world(db_url, tmp_path, provider)
        yield add_people(world)
        world.provider_client.close()
        world.runtime.db.dispose()


def mercato(cw: CaseWorld, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = platform_env(cw.world.runtime.settings.database_url, tmp_path / "cli-data")
    return run_mercato("admin", *args, env=env, timeout=120)


def test_decide_dispute_approve_refunds_and_a_second_decision_fails(
    cw: CaseWorld, tmp_path: Path
) -> None:
    call = cw.session_call()
    case_id = cw.dispute(call).json()["caseId"]

    done = mercato(cw, tmp_path, "decide-dispute", case_id, "--approve", "--reason", "ok", "--json")

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["caseId"], data["state"]) == (case_id, "REFUNDED")
    assert data["decision"]["decidedBy"] == "operator:cli"
    assert cw.receipt(call)["settlement"] == "REFUNDED"
    again = mercato(cw, tmp_path, "decide-dispute", case_id, "--deny", "--reason", "no")
    assert again.returncode != 0
    assert "INVALID_CASE_TRANSITION" in again.stderr
    assert again.stdout == ""


def test_decide_report_uphold_holds_the_listing(cw: CaseWorld, tmp_path: Path) -> None:
    case_id = cw.report().json()["caseId"]
    wrong = mercato(cw, tmp_path, "decide-dispute", case_id, "--approve", "--reason", "x")
    assert wrong.returncode != 0
    assert "INVALID_CASE_TRANSITION" in wrong.stderr

    done = mercato(cw, tmp_path, "decide-report", case_id, "--uphold", "--reason", "confirmed")

    assert done.returncode == 0, done.stderr
    assert "UPHELD" in done.stdout
    assert cw.client.get("/v1/catalog/listings/acme.echo").status_code == 404
    usage = mercato(cw, tmp_path, "decide-report", case_id, "--reason", "no choice")
    assert usage.returncode == 2  # argparse: --uphold or --dismiss is required


def test_unknown_case_fails_clearly(cw: CaseWorld, tmp_path: Path) -> None:
    done = mercato(cw, tmp_path, "decide-report", "case_nope", "--dismiss", "--reason", "x")
    assert done.returncode == 2  # an unknown id is a bad argument (DESIGN.md §10)
    assert done.stderr == "error: argument CASE_ID: Case not found (CASE_NOT_FOUND)\n"
