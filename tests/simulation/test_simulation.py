"""The seeded fault simulation in CI: fixed seeds stay green on both backends, a seed replays
exactly, and each deliberately injected bug is caught (docs/reliability.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mercato.db import models
from support.simulation.bugs import BUGS
from support.simulation.cli import main
from support.simulation.harness import Simulation, Verdict
from support.simulation.runner import run_simulation

SEEDS = (1, 2, 3, 4, 5, 6)
STEPS = 50

# The invariant each bug must trip first (double-settle may surface as the ledger refusing the
# second debit inside the platform, or as the books no longer adding up).
CAUGHT_BY = {
    "resend-after-unknown": {"no-resend-after-unknown"},
    "double-settle": {"platform-error", "ledger-balanced", "caller-points-match-calls"},
    "quota-on-replay": {"quota-counts-accepted-intents", "replay-returns-stored-answer"},
}


def _simulate(db_url: str, tmp_path: Path, *, seed: int, steps: int, bug: str | None) -> Verdict:
    models.load_all()
    simulation = Simulation(
        seed=seed, steps=steps, database_url=db_url, data_dir=tmp_path / "data", bug=bug
    )
    return simulation.run(quiesce_every=25)


def _explain(verdict: Verdict) -> str:
    lines = [v.line() for v in verdict.violations[:5]]
    return "\n".join([f"seed {verdict.seed}:", *lines, "trace:", *verdict.failure_trace])


@pytest.mark.parametrize("seed", SEEDS)
def test_fixed_seed_keeps_every_invariant(db_url: str, tmp_path: Path, seed: int) -> None:
    verdict = _simulate(db_url, tmp_path, seed=seed, steps=STEPS, bug=None)

    assert verdict.passed, _explain(verdict)
    assert verdict.steps_run == STEPS
    assert verdict.stats["quiescences"] == 2
    # The run exercised the paths it claims to: answers of several kinds, worker recovery.
    assert verdict.stats.get("answer_200", 0) > 0
    assert verdict.stats.get("answer_202", 0) > 0
    assert verdict.stats.get("worker_items", 0) > 0


@pytest.mark.parametrize("bug", BUGS)
def test_injected_bug_is_caught(db_url: str, tmp_path: Path, bug: str) -> None:
    verdict = _simulate(db_url, tmp_path, seed=1, steps=300, bug=bug)

    assert not verdict.passed, f"{bug} went unnoticed for 300 steps"
    assert verdict.violations[0].invariant in CAUGHT_BY[bug], _explain(verdict)
    assert verdict.failure_trace, "a failure comes with its trace"


def test_same_seed_replays_the_same_run(db_url: str) -> None:
    # Each run on a scratch database of its own: a temporary SQLite file, or one created next
    # to the PostgreSQL test database. Same trace: same steps, faults, interleavings and ids.
    server = None if db_url.startswith("sqlite") else db_url
    first = run_simulation(seed=11, steps=50, quiesce_every=25, database_url=server)
    second = run_simulation(seed=11, steps=50, quiesce_every=25, database_url=server)

    assert first.passed, _explain(first)
    assert first.trace == second.trace
    assert first.stats == second.stats


def test_a_different_seed_gives_a_different_run() -> None:
    one = run_simulation(seed=21, steps=15)
    other = run_simulation(seed=22, steps=15)

    assert one.trace != other.trace


def test_a_failing_seed_prints_seed_step_trace_and_how_to_reproduce(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--seed", "1", "--steps", "60", "--inject-bug", "double-settle"])

    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED seed 1 at step " in out
    assert "minimal trace:" in out
    assert (
        "reproduce: python tests/simulate.py --seed 1 --steps 60 --inject-bug double-settle" in out
    )


def test_the_checkout_script_runs_a_seed_and_prints_its_verdict() -> None:
    script = Path(__file__).parents[1] / "simulate.py"
    ran = subprocess.run(
        [sys.executable, str(script), "--seed", "2", "--steps", "5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert ran.returncode == 0, ran.stderr
    verdict = json.loads(ran.stdout)
    assert (verdict["seed"], verdict["stepsRun"], verdict["passed"]) == (2, 5, True)


def test_a_bad_step_count_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--steps", "0"])

    assert exited.value.code == 2
    assert "--steps must be at least 1" in capsys.readouterr().err


def test_a_run_with_a_bug_puts_every_function_back() -> None:
    from mercato.invocations import flows, money
    from mercato.ledger import service as ledger

    before = (flows.conclude, flows.prepare, ledger.settle, money.SETTLE)
    run_simulation(seed=3, steps=20, bug="double-settle")

    assert (flows.conclude, flows.prepare, ledger.settle, money.SETTLE) == before
