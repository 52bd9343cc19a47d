"""The benchmark's progress bar (issue 23: rich progress on long work): one step per
measurement, the harness's lines printed above it, nothing left behind on a pipe."""

from __future__ import annotations

import pytest
from bench.__main__ import progress_bar
from bench.harness import MEASUREMENTS_PER_RUN, Options, measurements


def test_a_run_counts_ten_measurements_per_store_and_twice_that_with_growth() -> None:
    assert MEASUREMENTS_PER_RUN == 10
    assert measurements(Options(stores=("sqlite",))) == 10
    assert measurements(Options(stores=("sqlite", "postgresql"), growth=True)) == 40


def test_the_bar_takes_every_step_and_prints_the_harness_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = Options(stores=("sqlite",))
    with progress_bar(options) as shown:
        assert shown.duration == options.duration and shown.stores == options.stores
        for index in range(measurements(options)):
            shown.step(f"measurement {index}")
        shown.say("[sqlite] seeded")
    captured = capsys.readouterr()
    assert "[sqlite] seeded" in captured.err
    assert captured.out == ""
