"""What the slow-work measurements conclude (issue 39), on made-up figures (exact): which limit
bounds a capacity burst (`bench.capacity.bounds`) and whether it passed; whether a quick load
beside a flood stayed within 20 % of itself alone (`bench.neighbour.verdict`); how refusals are
counted (`bench.slow.Tally`). And the lean provider's slow mode on a real loopback server: a
call asking to sleep is counted asleep while it sleeps, and answered afterwards."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from builders.platform_process import free_port
from builders.servers import uvicorn_thread

ROOT = Path(__file__).parents[3]


def _bench(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module(f"bench.{name}")


def _bounds(capacity: ModuleType, **changed: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "calls": 5000,
        "in_flight": 5000,
        "settled_first": 5000,
        "delay": 8.0,
        "timeout": 10.0,
        "max_latency_s": 12.5,
        "provider_elapsed_max_s": 9.5,
        "burst_seconds": 9.6,
        "serve_cpu_ms_per_call": 0.0,
        "live_max_s": 0.4,
        "started_over_s": 1.5,
        "serve_nofile": 20000,
        "serve_base_fds": 20,
        "provider_nofile": 20000,
        "client_nofile": 20000,
        "ephemeral_ports": 28232,
        "rss_base_kib": 100 * 1024,
        "rss_peak_kib": 400 * 1024,
        "max_in_flight": 5000,
    }
    figures.update(changed)
    result: dict[str, Any] = capacity.bounds(**figures)
    return result


def test_a_burst_held_whole_names_the_nearest_limit_and_what_each_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    shown = _bounds(capacity)
    allowed = shown["calls_allowed_by"]
    assert allowed["serve_file_descriptors"] == (20000 - 20) // 2
    assert allowed["provider_file_descriptors"] == 20000
    assert allowed["ephemeral_ports_per_address_pair"] == 28232
    # 300 MiB over 5,000 calls: 61.44 KiB each; (1 GiB - 100 MiB) / 61.44 KiB
    assert shown["rss_per_call_kib"] == 61.4
    assert allowed["serve_rss_1_GiB"] == int((1024 * 1024 - 100 * 1024) / (300 * 1024 / 5000))
    assert allowed["connection_max_in_flight"] == 5000
    assert shown["nearest_limit"] == "serve_file_descriptors"  # not the harness's own setting
    assert shown["bound_by"].startswith("not reached: all 5000 at once")
    assert shown["notes"] == [
        "slowest answer 9.50 s as serve (its provider call) timed it, provider timeout 10 s, "
        "provider delay 8 s: +0.50 s to spare"
    ]


def test_a_burst_all_asleep_but_read_late_is_bound_by_the_provider_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    shown = _bounds(
        capacity, settled_first=35, provider_elapsed_max_s=13.6, serve_cpu_ms_per_call=4.0
    )
    assert shown["bound_by"] == "the provider timeout: serve read answers too late"
    assert "only 35 were settled on their first answer" in shown["notes"][0]
    assert "4.00 ms of CPU per call" in shown["notes"][1]
    assert "of the order of 500 calls' work fits in it" in shown["notes"][1]
    assert shown["notes"][2].endswith(
        "-3.60 s to spare (calls past it are unknown outcomes: reconciled)"
    )


def test_a_burst_answered_in_waves_is_bound_by_slots_inside_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    shown = _bounds(
        capacity,
        in_flight=103,
        settled_first=0,
        max_latency_s=31.3,
        provider_elapsed_max_s=None,
        started_over_s=None,
        max_in_flight=None,
    )
    assert shown["bound_by"] == "slots inside serve: about 103 provider calls at once"
    assert "connection_max_in_flight" not in {
        k for k, v in shown["calls_allowed_by"].items() if v is not None
    }
    assert shown["notes"][-1] == (
        "slowest answer 31.30 s as the caller timed it, provider timeout 10 s, provider delay "
        "8 s: -21.30 s to spare (calls past it are unknown outcomes: reconciled)"
    )


def test_a_burst_with_serve_s_loop_behind_past_the_margin_is_bound_by_its_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    shown = _bounds(
        capacity, in_flight=4549, settled_first=299, max_latency_s=51.3, live_max_s=44.6
    )
    assert shown["bound_by"] == (
        "serve's CPU: its event loop fell behind by more than the timeout's margin"
    )
    assert shown["notes"][0].startswith("a trivial request (/health/live) waited up to 44.6 s")
    assert "(299 of 5000 settled on their first answer, 4549 asleep" in shown["notes"][0]


def test_a_burst_spread_by_acceptance_is_bound_by_the_acceptance_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    shown = _bounds(capacity, in_flight=2133, settled_first=5000, started_over_s=41.3)
    assert shown["bound_by"] == "the rate at which serve accepts calls"
    assert shown["notes"][0].startswith(
        "only 2133 of 5000 calls were asleep at the provider at once: serve started their "
        "provider calls over 41.3 s, longer than the 8 s each sleeps"
    )
    # started together but never all asleep at once: they waited inside serve
    waited = _bounds(capacity, in_flight=100, settled_first=5000, started_over_s=2.0)
    assert waited["bound_by"] == "slots inside serve: about 100 provider calls at once"
    assert "serve started their provider calls within 2.0 s" in waited["notes"][0]
    # without serve's log: the slowest answer under twice the delay is acceptance
    unlogged = _bounds(capacity, in_flight=3100, started_over_s=None, burst_seconds=13.0)
    assert unlogged["bound_by"] == "the rate at which serve accepts calls"


def test_serve_s_provider_call_lines_give_errors_elapsed_and_the_spread_of_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    slow = _bench(monkeypatch, "slow")
    log = tmp_path / "serve.log"
    before = b'{"ts":"2026-12-07T02:00:00.000+00:00","msg":"provider call","operation":"execute",'
    before += b'"provider_error":null,"elapsed_ms":8000.0}\n'
    log.write_bytes(before)
    _, offset = slow.provider_calls(log)
    lines = [
        # ended 02:00:10.0 after 8.5 s: started 02:00:01.5
        b'{"ts":"2026-12-07T02:00:10.000+00:00","level":"INFO","msg":"provider call",'
        b'"operation":"execute","provider_status":200,"provider_error":null,"elapsed_ms":8500.0}',
        b"not json",
        b'{"ts":"2026-12-07T02:00:10.000+00:00","msg":"request","status":200}',
        # ended 02:00:13.5 after 10 s: started 02:00:03.5
        b'{"ts":"2026-12-07T02:00:13.500+00:00","msg":"provider call","operation":"execute",'
        b'"provider_status":null,"provider_error":"timeout","elapsed_ms":10000.0}',
        b'{"ts":"2026-12-07T02:00:14.000+00:00","msg":"provider call","operation":"reconcile",'
        b'"provider_error":null,"elapsed_ms":3.0}',
    ]
    log.write_bytes(before + b"\n".join(lines) + b"\n")
    shown, end = slow.provider_calls(log, offset)
    assert shown == {
        "calls": 2,
        "by_error": {"none": 1, "timeout": 1},
        "elapsed_ms_p50": 10000.0,
        "elapsed_ms_max": 10000.0,
        "started_over_s": 2.0,
    }
    assert end == log.stat().st_size


def test_a_capacity_run_passes_only_whole_settled_balanced_and_under_a_gibibyte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = _bench(monkeypatch, "capacity")
    burst = {
        "calls": 10,
        "statuses": {"200": 10},
        "connection_errors": 0,
        "provider_asleep_at_once": 10,
        "settlement": {"invocations": 10, "all_settled_on_first_answer": True},
    }
    assert capacity.settled_whole(burst)
    assert not capacity.settled_whole({**burst, "statuses": {"200": 9, "202": 1}})
    assert not capacity.settled_whole({**burst, "provider_asleep_at_once": 9})
    assert not capacity.settled_whole({**burst, "connection_errors": 1})
    assert not capacity.settled_whole(
        {**burst, "settlement": {"invocations": 10, "all_settled_on_first_answer": False}}
    )
    good = {
        "bursts": [{**burst, "settled_whole": True}],
        "settlement": {"all_settled_on_first_answer": True},
        "ledger": {"verify_ledger_balanced": True, "every_accepted_call_settled_once": True},
        "serve_rss_under_1_gib": True,
    }
    assert capacity.passed(good)
    assert not capacity.passed({**good, "bursts": [{**burst, "settled_whole": False}]})
    assert not capacity.passed({**good, "settlement": {"all_settled_on_first_answer": False}})
    assert not capacity.passed({**good, "serve_rss_under_1_gib": False})
    assert not capacity.passed({**good, "ledger": {"verify_ledger_balanced": True}})


def test_the_neighbour_verdict_allows_20_percent_each_way_and_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    neighbour = _bench(monkeypatch, "neighbour")
    alone = {"rate": 500.0, "p50_ms": 10.0}
    at_the_edge = neighbour.verdict(alone, {"rate": 400.0, "p50_ms": 12.0})
    assert at_the_edge == {"rate_ratio": 0.8, "p50_ratio": 1.2, "within": 0.2, "passed": True}
    assert not neighbour.verdict(alone, {"rate": 399.0, "p50_ms": 10.0})["passed"]
    assert not neighbour.verdict(alone, {"rate": 500.0, "p50_ms": 12.1})["passed"]
    assert neighbour.verdict(alone, {"rate": 520.0, "p50_ms": 9.0})["passed"]
    assert not neighbour.verdict({"rate": 0.0, "p50_ms": 10.0}, alone)["passed"]


def test_the_tally_counts_refusals_by_code_and_those_without_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = _bench(monkeypatch, "slow")
    tally = slow.Tally()
    tally(200, b'{"result":{}}')
    tally(503, b'{"code":"PROVIDER_BUSY","retryAfter":1}')
    tally(503, b'{"code":"PROVIDER_BUSY"}')
    tally(503, b'{"code":"PROVIDER_NOT_APPROVED","retryAfter":1}')
    tally(502, b"<html>not json</html>")
    assert tally.summary() == {
        "statuses": {"200": 1, "502": 1, "503": 3},
        "problem_codes": {"502 -": 1, "503 PROVIDER_BUSY": 2, "503 PROVIDER_NOT_APPROVED": 1},
        "provider_busy": 2,
        "provider_busy_without_retryAfter": 1,
    }


def test_the_lean_provider_counts_a_sleeping_call_while_it_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three calls asking to sleep are all counted asleep at once (waited for by polling the
    provider's own count, not by a timer), then answered SUCCEEDED; a call without `sleep`
    is answered without being counted."""
    lean = _bench(monkeypatch, "lean_provider")
    assert lean.sleep_of({"sleep": 2}) == 2.0
    assert lean.sleep_of({"sleep": True}) == 0.0
    assert lean.sleep_of({"sleep": "9"}) == 0.0
    assert lean.sleep_of({"sleep": -1}) == 0.0
    assert lean.sleep_of({"sleep": 10**9}) == lean.MAX_SLEEP_SECONDS
    port = free_port()
    server, thread = uvicorn_thread(lean.create_app("secret-credential"), port)
    thread.start()
    assert server.ready.wait(30)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer secret-credential"}

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, int], dict[str, int]]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def call(n: int, sleep: float) -> dict[str, Any]:
                response = await client.post(
                    "/v1/executions",
                    json={"payload": {"job": "x", "sleep": sleep}},
                    headers={**headers, "Idempotency-Key": f"k{n}"},
                )
                return dict(response.json())

            calls = [asyncio.create_task(call(n, 0.5)) for n in range(3)]
            while (await client.get(lean.SLEEPING_PATH)).json()["now"] < 3:
                await asyncio.sleep(0.01)  # polling the provider's own count
            during = (await client.get(lean.SLEEPING_PATH)).json()
            answers = await asyncio.gather(*calls)
            await call(9, 0)
            after = (await client.get(lean.SLEEPING_PATH, params={"reset": "1"})).json()
            return answers, during, after

    try:
        answers, during, after = asyncio.run(scenario())
        reset = httpx.get(url + lean.SLEEPING_PATH).json()
    finally:
        server.stop()
        thread.join(10)
    assert [a["outcome"] for a in answers] == ["SUCCEEDED"] * 3
    assert during["now"] == 3
    assert after == {"now": 0, "peak": 3, "answered": 3}
    assert reset == {"now": 0, "peak": 0, "answered": 3}


@pytest.mark.parametrize(
    ("module", "argv", "named"),
    [
        ("capacity", ["--calls", "5000,x"], "--calls"),
        ("capacity", ["--calls", "0"], "--calls"),
        ("capacity", ["--delay", "0"], "--delay"),
        ("capacity", ["--provider-timeout", "-1"], "--provider-timeout"),
        ("capacity", ["--store", "mysql"], "--store"),
        ("neighbour", ["--stores", "sqlite,mysql"], "--stores"),
        ("neighbour", ["--flood", "0"], "--flood"),
        ("neighbour", ["--flood-sleep", "0"], "--flood-sleep"),
        ("neighbour", ["--window", "-2"], "--window"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_naming_the_argument(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    argv: list[str],
    named: str,
) -> None:
    """Refused before anything starts (no database, no process)."""
    main = _bench(monkeypatch, module).main
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"python -m bench.{module}: error: ")
    assert named in error
