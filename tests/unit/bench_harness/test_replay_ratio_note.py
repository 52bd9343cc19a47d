"""The benchmark's table says what its replay ratio divides by (decisions 0505, 0507): the lean
provider alone measured in windows alternated with the replays, not the provider-alone column
measured minutes earlier; and it prints both rates, each round's, and the quotient over the first
one, so the change hides nothing."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[3]


def _summary(rate: float) -> dict[str, Any]:
    return {"rate": rate, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "cpu_ms_per_request": 0.2}


def test_the_table_names_the_replay_ratios_denominator_and_keeps_the_first_quotient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    harness = importlib.import_module("bench.harness")
    config = {
        "provider_direct": _summary(5266.0),
        "invoke": _summary(1300.0),
        "ratio": 0.2469,
        "replay_provider_direct": _summary(6646.0),
        "replay": _summary(6000.0),
        "replay_ratio": 0.9028,
        "replay_rounds": [
            {"provider": 6153.0, "replays": 5600.0},
            {"provider": 3593.4, "replays": 3300.0},
            {"provider": 6800.0, "replays": 6100.0},
        ],
        "replay_ratio_first_base": 1.1394,
        "receipts": _summary(900.0),
        "receipts_depth": {"pages": 50, "first_ms": 1.0, "median_ms": 1.0, "last_ms": 1.0},
    }
    result = {"stores": {"sqlite": {"ledger": {}, "configurations": {"sqlite": config}}}}

    shown = harness.table(result)

    assert harness.REPLAY_RATIO_NOTE in shown.splitlines()
    assert "replay_provider_direct" in harness.REPLAY_RATIO_NOTE
    assert "replay_ratio_first_base" in harness.REPLAY_RATIO_NOTE
    assert "replay_rounds" in harness.REPLAY_RATIO_NOTE
    assert f"{harness.REPLAY_ROUNDS} alternated rounds" in harness.REPLAY_RATIO_NOTE
    row = shown.splitlines()[2].split()
    assert "0.90" in row and "1.14" not in row  # the replay × column: the alternated quotient
    assert (
        "sqlite: replay × divides by the provider alone in windows alternated with the replays, "
        "6646/s (rounds, provider/replays per s: 6153/5600 3593/3300 6800/6100; "
        "first measurement 5266/s; replays over it 1.14×)"
    ) in shown.splitlines()
