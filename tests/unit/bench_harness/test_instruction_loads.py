"""`bench.instructions` counts fresh invokes: each load gets a factory of its own, so no
Idempotency-Key repeats across the warm-up and the counted windows (a repeated key is a replay,
answered from the store: it counted the replay figure of decision 0420 as an invoke's)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).parents[3]


def test_every_load_sends_keys_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    instructions = importlib.import_module("bench.instructions")
    runner = SimpleNamespace(seeded=SimpleNamespace(api_key="k"), run_id="r1")
    factories = instructions.fresh_factories(runner, "serve-1")
    keys = []
    for _load in range(3):  # run_load numbers its requests (client, n) from 0 every time
        make = next(factories)
        keys += [make(client, n)[2]["Idempotency-Key"] for client in range(2) for n in range(3)]
    assert len(keys) == 18
    assert len(set(keys)) == 18
