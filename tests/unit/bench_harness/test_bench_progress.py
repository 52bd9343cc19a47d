"""The benchmark's progress bar (issue 23: rich progress on long work): one step per
measurement, the harness's lines printed above it, nothing on stdout."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[3]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module("bench.__main__"), importlib.import_module("bench.harness")


def test_a_run_counts_its_measurements_per_store_and_twice_that_with_growth(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    _main, harness = bench
    per_run = harness.MEASUREMENTS_PER_RUN
    # the lean provider, invoke, the floors, the SDK pair, one client x3, each replay round's
    # two windows, the leanest path's replays, catalog, receipts x2
    assert per_run == 13 + 2 * harness.REPLAY_ROUNDS == 19
    assert harness.measurements(harness.Options(stores=("sqlite",))) == per_run
    both = harness.Options(stores=("sqlite", "postgresql"), growth=True)
    assert harness.measurements(both) == 4 * per_run


def test_the_bar_takes_every_step_and_prints_the_harness_lines(
    bench: tuple[ModuleType, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    main, harness = bench
    options = harness.Options(stores=("sqlite",))
    with main.progress_bar(options) as shown:
        assert shown.duration == options.duration and shown.stores == options.stores
        for index in range(harness.measurements(options)):
            shown.step(f"measurement {index}")
        shown.say("[sqlite] seeded")  # brackets are text, not rich markup
    captured = capsys.readouterr()
    assert "[sqlite] seeded" in captured.err
    assert captured.out == ""
