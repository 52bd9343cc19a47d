"""The slow-work measurements (issue 39) run end to end on each store, small: `python -m
bench.capacity` holds a burst of sleeping calls in one serve process and settles each on its first
answer; `python -m bench.neighbour` floods one provider beside a quick load on another, in
alternated windows, and reports the flood's refusals. Their results are well formed and their
ledgers balanced. No timing is asserted: the benchmark is a tool (whether the quick load stayed
within 20 % is its verdict, not this test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).parents[3]
STORES = ("sqlite", "postgresql")


def _bench(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.stdout, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("store", STORES)
def test_capacity_holds_a_burst_at_once_and_settles_each_call_on_its_first_answer(
    store: str, tmp_path: Path
) -> None:
    code, result, stderr = _bench(
        "bench.capacity",
        *("--calls", "12,30", "--delay", "2", "--store", store, "--out", str(tmp_path)),
    )
    # 2 s each: time enough, on a loaded machine, for serve to accept 30 calls before the
    # first is answered, so that all are asleep at the provider at once
    assert code == 0, stderr[-3000:]
    assert json.loads(Path(result["json_path"]).read_text())["bursts"] == result["bursts"]
    assert [b["calls"] for b in result["bursts"]] == [12, 30]
    for burst in result["bursts"]:
        calls = burst["calls"]
        # the provider's own count: every call of the burst was asleep there at once
        assert burst["provider_asleep_at_once"] == calls
        assert burst["statuses"] == {"200": calls}
        assert burst["settlement"]["settled_on_first_answer"] == calls
        assert burst["provider_calls_seen_by_serve"]["by_error"] == {"none": calls}
        assert burst["settled_whole"] is True
        assert burst["bounds"]["bound_by"].startswith(f"not reached: all {calls} at once")
        assert burst["serve_health_live_during"]["failures"] == 0
    assert result["largest_burst_settled_whole"] == 30
    assert result["settlement"]["all_settled_on_first_answer"] is True
    assert result["settlement"]["reconciled"] == 0
    assert result["ledger"]["verify_ledger_balanced"] is True
    assert result["ledger"]["every_accepted_call_settled_once"] is True
    assert 0 < result["serve_vmhwm_mib"] < 1024
    assert result["machine"]["rlimit_nofile"]["soft"] == result["machine"]["rlimit_nofile"]["hard"]
    assert result["passed"] is True


@pytest.mark.parametrize("store", STORES)
def test_the_neighbour_flood_is_refused_beyond_its_limit_beside_a_quick_load(
    store: str, tmp_path: Path
) -> None:
    """12 slow callers against a connection that admits 4 per process: 4 asleep at the slow
    provider at once, the other 8 refused 503 PROVIDER_BUSY (with retryAfter) in each period;
    every quick call answered 200; nothing refused was accepted (the ledger's counts)."""
    code, result, stderr = _bench(
        "bench.neighbour",
        *("--stores", store, "--flood", "12", "--limit", "4", "--flood-sleep", "1"),
        *("--clients", "2", "--window", "0.5", "--rounds", "2", "--out", str(tmp_path)),
    )
    assert code in (0, 1), stderr[-3000:]  # 1: the quick load missed the 20 % target
    data = result["stores"][store]
    assert set(data["quick_answers"]["statuses"]) == {"200"}
    assert data["alone"]["requests"] > 0
    assert data["flooded"]["requests"] > 0
    assert set(data["verdict"]) == {"rate_ratio", "p50_ratio", "within", "passed"}
    assert len(data["rounds"]) == 2
    for flood in data["rounds"]:
        assert flood["slow_provider_asleep_at_once"] == 4
        assert flood["provider_busy"] >= 8  # the first period's refusals at least
        assert flood["provider_busy_without_retryAfter"] == 0
        assert set(flood["statuses"]) == {"200", "503"}
        assert set(flood["problem_codes"]) == {"503 PROVIDER_BUSY"}
    assert data["flood"]["provider_busy"] == sum(f["provider_busy"] for f in data["rounds"])
    ledger = data["ledger"]
    assert ledger["verify_ledger_balanced"] is True
    assert ledger["every_accepted_call_settled_once"] is True
    # a refused call was never accepted: the accepted calls are exactly the 200s
    assert ledger["accepted"] == ledger["answers_200"]
