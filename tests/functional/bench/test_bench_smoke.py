"""The benchmark harness still runs end to end: a short SQLite run with two clients, grown by a
small preload, produces a well-formed result and a balanced ledger. The headline reference is the
lean in-memory FastAPI provider (which must pass the platform's conformance checks for the run to
start), with the SDK provider as a second line. No timing is asserted: the benchmark is a tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).parents[3]
MEASURES = ("rate", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "requests", "statuses")


def test_bench_runs_on_sqlite_and_leaves_a_balanced_ledger(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "--stores", "sqlite", "--duration", "1.0"),
            *("--concurrency", "2", "--workers", "1", "--out", str(tmp_path), "--json"),
            *("--growth", "--growth-invocations", "3000", "--growth-listings", "40"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)

    written = json.loads(Path(result["json_path"]).read_text())
    assert written["stores"].keys() == {"sqlite"}
    config = written["stores"]["sqlite"]["configurations"]["sqlite"]
    scenarios = ("provider_direct", "invoke", "replay_provider_direct", "replay", "catalog")
    for scenario in (*scenarios, "receipts"):
        assert set(MEASURES) <= config[scenario].keys(), scenario
        assert config[scenario]["requests"] > 0, scenario
    # every counted invoke was answered 200 (fresh keys), every replay too (same stored answer)
    assert set(config["invoke"]["statuses"]) == {"200"}
    assert set(config["replay"]["statuses"]) == {"200"}
    # ratios are kept to 4 decimals and the rates shown to 0.1: compare to that precision
    assert config["ratio"] == pytest.approx(
        config["invoke"]["rate"] / config["provider_direct"]["rate"], rel=1e-2, abs=5e-4
    )
    # the closed-loop floor: 2 clients over the provider's own rate in this run
    assert config["closed_loop_floor_ms"] == pytest.approx(
        2 * 1000 / config["provider_direct"]["rate"], rel=1e-2
    )
    assert config["one_client"]["invoke"]["requests"] > 0
    # the measured floor: the same engine on a bare route, real calls (settled, in the ledger)
    assert set(config["engine_floor"]["statuses"]) == {"200"}
    assert config["engine_floor"]["requests"] > 0
    assert config["engine_floor_ratio"] == pytest.approx(
        config["engine_floor"]["rate"] / config["provider_direct"]["rate"], rel=1e-2, abs=5e-4
    )
    # the leanest-path floor (bench/leanest.py): real calls in the product's ledger, replays
    # answered from the same rows, measured at both concurrencies with its CPU
    assert set(config["leanest"]["statuses"]) == {"200"}
    assert set(config["leanest_replay"]["statuses"]) == {"200"}
    assert config["leanest_ratio"] == pytest.approx(
        config["leanest"]["rate"] / config["provider_direct"]["rate"], rel=1e-2, abs=5e-4
    )
    assert config["leanest_cpu_ms"] == config["leanest"]["cpu_ms_per_request"] > 0
    assert config["one_client"]["leanest"]["requests"] > 0
    assert "leanest_added_p50_ms" in config
    # the replay ratios divide by the lean provider alone measured in windows alternated with
    # the replays (0505, 0507): REPLAY_ROUNDS rounds of equal windows, so each side's merged
    # rate is the mean of its rounds' rates; the quotient over the first provider-alone
    # measurement stays in the result
    rounds = config["replay_rounds"]
    assert len(rounds) == 3 and all(r["provider"] > 0 and r["replays"] > 0 for r in rounds)
    for side, scenario in (("provider", "replay_provider_direct"), ("replays", "replay")):
        assert config[scenario]["rate"] == pytest.approx(
            sum(r[side] for r in rounds) / len(rounds), rel=1e-2, abs=0.2
        )
    again = config["replay_provider_direct"]["rate"]
    assert config["leanest_replay_ratio"] == pytest.approx(
        config["leanest_replay"]["rate"] / again, rel=1e-2, abs=5e-4
    )
    assert config["replay_ratio"] == pytest.approx(
        config["replay"]["rate"] / again, rel=1e-2, abs=5e-4
    )
    assert config["replay_ratio_first_base"] == pytest.approx(
        config["replay"]["rate"] / config["provider_direct"]["rate"], rel=1e-2, abs=5e-4
    )

    # the second line: the SDK provider alone and through the platform, in the same run
    sdk = config["sdk_provider"]
    for scenario in ("provider_direct", "invoke"):
        assert set(MEASURES) <= sdk[scenario].keys(), scenario
        assert sdk[scenario]["requests"] > 0, scenario
    assert set(sdk["invoke"]["statuses"]) == {"200"}
    assert sdk["ratio"] == pytest.approx(
        sdk["invoke"]["rate"] / sdk["provider_direct"]["rate"], rel=1e-2, abs=5e-4
    )

    # --growth: the same measurements again after the preload, in the same processes
    grown = written["stores"]["sqlite"]["configurations"]["sqlite+growth"]
    assert grown["preload"]["invocations"] == 3000 and grown["preload"]["listings"] == 40
    assert set(grown["invoke"]["statuses"]) == {"200"}
    assert grown["invoke_vs_empty"] == pytest.approx(
        grown["invoke"]["rate"] / config["invoke"]["rate"], rel=1e-2, abs=5e-4
    )
    assert grown["receipts_depth"]["pages"] > 0

    ledger = written["stores"]["sqlite"]["ledger"]
    assert ledger["verify_ledger_balanced"] is True
    assert ledger["held_reservations"] == 0
    assert ledger["accepted"] == ledger["settled"] == ledger["answers_200"] > 0
    assert ledger["every_accepted_call_settled_once"] is True
    assert "every accepted call settled exactly once" in done.stderr


def test_a_run_fails_unless_the_ledger_is_balanced_and_every_call_settled_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    from bench.harness import ledger_ok

    good = {"verify_ledger_balanced": True, "every_accepted_call_settled_once": True}
    assert ledger_ok(good)
    assert not ledger_ok({**good, "verify_ledger_balanced": False})
    assert not ledger_ok({**good, "every_accepted_call_settled_once": False})
    assert not ledger_ok({})
