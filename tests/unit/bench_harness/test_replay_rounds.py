"""The replay ratio's two sides are measured in alternated windows (decision 0507): rounds of the
lean provider alone immediately followed by the platform's replays, each side's windows merged
(rate = total requests over total seconds, percentiles over every sample, CPU summed over the
answers summed), and the ratio taken of the merged rates, so drift in the machine falls on both.

The merge and the alternation are checked on made-up windows (exact figures), and once on real
loopback servers (asyncio servers in a thread of the test) to see the windows really alternate."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from builders.listeners import asyncio_server, read_http

ROOT = Path(__file__).parents[3]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module("bench.harness")


def _window(
    harness: ModuleType,
    *,
    requests: int,
    seconds: float,
    latency: float,
    statuses: dict[int, int],
    errors: int = 0,
    answered: int | None = None,
    client_cpu: float = 0.0,
    cpu: float | None = None,
) -> tuple[Any, float | None]:
    result = harness.LoadResult(
        requests=requests,
        seconds=seconds,
        latencies_ms=[latency] * requests,
        statuses=Counter(statuses),
        errors=errors,
        answered=requests if answered is None else answered,
        client_cpu_seconds=client_cpu,
    )
    return result, cpu


def test_merged_windows_sum_counts_statuses_and_cpu_and_pool_the_latencies(
    harness: ModuleType,
) -> None:
    first = _window(
        harness,
        requests=300,
        seconds=1.0,
        latency=1.0,
        statuses={200: 290, 503: 10},
        errors=1,
        answered=310,
        client_cpu=0.2,
        cpu=0.3,
    )
    second = _window(
        harness,
        requests=100,
        seconds=1.0,
        latency=9.0,
        statuses={200: 100},
        errors=2,
        answered=110,
        client_cpu=0.1,
        cpu=0.1,
    )

    merged, cpu = harness.merge_windows([first, second])

    assert merged.requests == 400 and merged.seconds == 2.0
    assert merged.rate == 200.0  # total over total seconds, not the mean of 300 and 100
    assert merged.statuses == Counter({200: 390, 503: 10})
    assert merged.errors == 3 and merged.answered == 420
    assert merged.client_cpu_seconds == pytest.approx(0.3)
    assert cpu == pytest.approx(0.4)
    assert sorted(merged.latencies_ms) == [1.0] * 300 + [9.0] * 100

    summary = harness.summarised(merged, cpu)
    assert summary["requests"] == 400 and summary["rate"] == 200.0
    assert summary["statuses"] == {"200": 390, "503": 10}
    assert summary["p50_ms"] == 1.0 and summary["p95_ms"] == 9.0  # over every sample
    assert summary["mean_ms"] == 3.0
    # the server's CPU per answer: CPU summed over answers summed (warm-up answers included)
    assert summary["cpu_ms_per_request"] == round(1000 * 0.4 / 420, 3)


def test_a_window_without_a_measured_process_leaves_the_merged_cpu_unknown(
    harness: ModuleType,
) -> None:
    with_cpu = _window(harness, requests=10, seconds=1.0, latency=1.0, statuses={200: 10}, cpu=0.1)
    without = _window(harness, requests=10, seconds=1.0, latency=1.0, statuses={200: 10})

    merged, cpu = harness.merge_windows([with_cpu, without])

    assert cpu is None
    assert harness.summarised(merged, cpu)["cpu_ms_per_request"] is None
    assert harness.merge_windows([])[0].rate == 0.0


def test_rounds_alternate_the_provider_and_the_replays_and_the_ratio_is_of_merged_totals(
    harness: ModuleType,
) -> None:
    calls: list[tuple[str, int, float]] = []
    # the machine drifts by half between rounds; the replays run 10 % faster in each round
    provider_rates = (6000, 3000, 6000)
    replay_rates = (6600, 3300, 6600)

    def provider(index: int, seconds: float) -> tuple[Any, float | None]:
        calls.append(("provider", index, seconds))
        requests = round(provider_rates[index] * seconds)
        return _window(
            harness, requests=requests, seconds=seconds, latency=2.0, statuses={200: requests}
        )

    def replays(index: int, seconds: float) -> tuple[Any, float | None]:
        calls.append(("replays", index, seconds))
        requests = round(replay_rates[index] * seconds)
        return _window(
            harness,
            requests=requests,
            seconds=seconds,
            latency=1.0,
            statuses={200: requests},
            cpu=0.01 * (index + 1),
        )

    got = harness.alternate(provider, replays, rounds=harness.REPLAY_ROUNDS, seconds=6.0)

    assert harness.REPLAY_ROUNDS == 3
    assert calls == [
        ("provider", 0, 2.0),
        ("replays", 0, 2.0),
        ("provider", 1, 2.0),
        ("replays", 1, 2.0),
        ("provider", 2, 2.0),
        ("replays", 2, 2.0),
    ]
    assert got.rounds == [
        {"provider": 6000.0, "replays": 6600.0},
        {"provider": 3000.0, "replays": 3300.0},
        {"provider": 6000.0, "replays": 6600.0},
    ]
    assert got.base["requests"] == 30000 and got.base["seconds"] == 6.0
    assert got.base["rate"] == 5000.0
    assert got.measured["requests"] == 33000 and got.measured["rate"] == 5500.0
    assert got.ratio == 1.1  # (33,000 / 6 s) / (30,000 / 6 s)
    assert got.base["cpu_ms_per_request"] is None  # the fake provider names no process
    assert got.measured["cpu_ms_per_request"] == round(1000 * 0.06 / 33000, 3)


def test_a_provider_that_answers_nothing_gives_no_ratio(harness: ModuleType) -> None:
    def nothing(_index: int, seconds: float) -> tuple[Any, float | None]:
        return _window(harness, requests=0, seconds=seconds, latency=1.0, statuses={})

    def some(_index: int, seconds: float) -> tuple[Any, float | None]:
        return _window(harness, requests=5, seconds=seconds, latency=1.0, statuses={200: 5})

    assert harness.alternate(nothing, some, rounds=2, seconds=1.0).ratio is None


@contextmanager
def server(name: str, arrivals: list[str]) -> Iterator[str]:
    """An HTTP/1.1 server on a loopback port answering every request 200 `{}`, appending `name`
    to `arrivals` as each request is read whole; yields its URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_http(reader)
                arrivals.append(name)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    with asyncio_server(handle) as url:
        yield url


def _post(_client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
    return "POST", "/v1/executions", {"Idempotency-Key": f"k-{n}"}, b"{}"


def test_on_real_servers_each_round_measures_the_provider_then_the_replays(
    harness: ModuleType,
) -> None:
    arrivals: list[str] = []
    me = os.getpid()  # the servers run in this process: its CPU is the measured tree's

    with server("provider", arrivals) as provider, server("platform", arrivals) as platform:

        def window(url: str) -> Callable[[int, float], tuple[Any, float | None]]:
            def measure(_index: int, seconds: float) -> tuple[Any, float | None]:
                measured: tuple[Any, float | None] = harness.measure_window(
                    me,
                    lambda: harness.run_load(
                        url, _post, concurrency=2, duration=seconds, warmup=0.0
                    ),
                )
                return measured

            return measure

        got = harness.alternate(window(provider), window(platform), rounds=3, seconds=0.9)

    # the servers saw the windows one after the other: provider, platform, three times over
    runs = [name for i, name in enumerate(arrivals) if i == 0 or arrivals[i - 1] != name]
    assert runs == ["provider", "platform"] * 3
    assert got.base["answered"] == arrivals.count("provider")
    assert got.measured["answered"] == arrivals.count("platform")
    assert got.base["seconds"] == got.measured["seconds"] == pytest.approx(0.9)
    assert got.base["statuses"] == {"200": got.base["requests"]}
    assert got.base["cpu_ms_per_request"] is not None
    assert got.ratio == round(got.measured["_rate"] / got.base["_rate"], 4)
    assert len(got.rounds) == 3
