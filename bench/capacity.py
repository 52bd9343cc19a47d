"""Capacity for slow work (issue 39): how many calls one `mercato serve` process holds in flight
to a provider that answers each `--delay` seconds after it arrives.

    python -m bench.capacity [--calls 1000,5000] [--delay 8] [--store sqlite|postgresql]
        [--provider-timeout S] [--out DIR] [--json]

One store, a fresh database; the lean provider (`bench.lean_provider`, asyncio on uvicorn: each
sleeping call is a coroutine and a socket, no thread) and `mercato serve --workers 1`. The
connection's `maxInFlight` is raised to the largest burst (`mercato admin update-connection ID
--max-in-flight N`) and, when needed, `MERCATO_PROVIDER_MAX_IN_FLIGHT_CEILING` and
`MERCATO_MAX_IN_FLIGHT` with it. The soft RLIMIT_NOFILE of this process, and so of serve, the
provider and the load generator it starts, is raised to the hard limit.

Each burst (`--calls`, in order, on the same serve) sends N invokes at once, one per
connection (`bench.load.run_burst`), and waits for every answer. Measured: the answers by status
and problem code, their latency, the most calls the provider had asleep at once (its own count:
the calls serve really held in flight), serve's peak RSS (sampled VmRSS, and VmHWM at the end)
and open descriptors. Then: every call settled on its first answer (one attempt, no
reconciliation), `verify-ledger` balanced and every accepted call settled exactly once. The
result says which limit bounds the number (`bounds`). Exits 1 when a burst's calls were not all
settled on their first answer with a 200, or the ledger check fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    RESULTS,
    SERVICE,
    Target,
    database,
    free_port,
    ledger_check,
    ledger_ok,
    measure_window,
    mercato,
    platform_env,
    process,
    seed,
)
from bench.load import run_burst
from bench.slow import (
    Sampler,
    Tally,
    connection_id,
    first_answers,
    kernel_limits,
    nofile_of,
    open_fds,
    provider_calls,
    raise_nofile,
    set_max_in_flight,
    sleeping,
    sleeping_factory,
    status_kib,
)

GIB_KIB = 1024 * 1024
SERVE_FDS_PER_CALL = 2  # the caller's connection and the connection to the provider


@dataclass
class Options:
    calls: tuple[int, ...] = (5000,)
    delay: float = 8.0
    store: str = "sqlite"
    provider_timeout: float | None = None  # None: the setting's default
    pg_admin_url: str = DEFAULT_PG_ADMIN
    out_dir: Path = RESULTS


def bounds(
    *,
    calls: int,
    in_flight: int,
    settled_first: int,
    delay: float,
    timeout: float,
    max_latency_s: float,
    provider_elapsed_max_s: float | None,
    burst_seconds: float,
    serve_cpu_ms_per_call: float,
    live_max_s: float | None,
    started_over_s: float | None,
    serve_nofile: int,
    serve_base_fds: int,
    provider_nofile: int,
    client_nofile: int,
    ephemeral_ports: int,
    rss_base_kib: int,
    rss_peak_kib: int,
    max_in_flight: int | None,
) -> dict[str, Any]:
    """How many calls at once each limit allows, from one burst's figures, and which allows the
    fewest (`nearest_limit`). Descriptors: serve holds two per call (the caller's socket and the
    provider's), the provider and the load generator one each; ports: one loopback address pair
    per connection; memory: serve's growth over its idle RSS per call held, projected to 1 GiB;
    the provider timeout: every call must be answered within it, so the burst's slowest answer
    is compared with it; acceptance: a burst the process could not accept within `delay` never
    had all its calls asleep at once (the provider's own count says how many it had), a burst
    during which serve kept a trivial request (`/health/live`, `live_max_s`) waiting longer than
    the timeout's margin over the delay had its event loop behind, and a burst whose calls never
    all slept at once was either accepted too slowly or waited inside serve: told apart by
    `started_over_s`, the seconds over which serve started their provider calls (from its log;
    longer than the delay: acceptance; shorter: a wait inside serve, answers in waves), or without
    it by the slowest answer (twice the delay or more: waves). `bound_by` says which of these held
    the burst back, in that order, or that none did."""
    per_call_kib = (rss_peak_kib - rss_base_kib) / in_flight if in_flight else 0.0
    limits: dict[str, int | None] = {
        "serve_file_descriptors": (serve_nofile - serve_base_fds) // SERVE_FDS_PER_CALL,
        "provider_file_descriptors": provider_nofile,
        "load_generator_file_descriptors": client_nofile,
        "ephemeral_ports_per_address_pair": ephemeral_ports,
        "serve_rss_1_GiB": (
            int((GIB_KIB - rss_base_kib) / per_call_kib) if per_call_kib > 0 else None
        ),
        "connection_max_in_flight": max_in_flight,
    }
    # the connection's own cap is the harness's setting (the largest burst), not a finding
    known = {
        name: value
        for name, value in limits.items()
        if value is not None and name != "connection_max_in_flight"
    }
    nearest = min(known, key=lambda name: known[name]) if known else None
    notes: list[str] = []
    margin_s = timeout - delay
    if in_flight >= calls and settled_first >= calls:
        bound_by = f"not reached: all {calls} at once; the nearest limit is {nearest}"
    elif live_max_s is not None and live_max_s > margin_s:
        bound_by = "serve's CPU: its event loop fell behind by more than the timeout's margin"
        notes.append(
            f"a trivial request (/health/live) waited up to {live_max_s:.1f} s in serve during "
            f"the burst, more than the {margin_s:g} s the timeout leaves over the delay: answers "
            f"that came back meanwhile were read after the timeout ({settled_first} of {calls} "
            f"settled on their first answer, {in_flight} asleep at the provider at once); the "
            "work per call, on the CPU this process gets, bounds it"
        )
    elif in_flight >= calls:
        bound_by = "the provider timeout: serve read answers too late"
        notes.append(
            f"all {calls} calls were asleep at the provider at once, but only {settled_first} "
            f"were settled on their first answer: the provider answered each {delay:g} s after "
            f"it arrived, and serve, busy with the whole burst, read the rest after its "
            f"{timeout:g} s timeout (unknown outcomes, reconciled later); the CPU serve spends "
            "per call, against the timeout's margin over the delay, bounds it"
        )
    elif started_over_s is not None and started_over_s > delay:
        bound_by = "the rate at which serve accepts calls"
        notes.append(
            f"only {in_flight} of {calls} calls were asleep at the provider at once: serve "
            f"started their provider calls over {started_over_s:.1f} s, longer than the "
            f"{delay:g} s each sleeps, so the first were answered before the last were sent; the "
            "rate at which serve accepts calls bounds it, not a limit below"
        )
    elif started_over_s is not None or max_latency_s >= 1.9 * delay:
        bound_by = f"slots inside serve: about {in_flight} provider calls at once"
        notes.append(
            f"only {in_flight} of {calls} calls were asleep at the provider at once, though "
            "serve started their provider calls "
            + (
                f"within {started_over_s:.1f} s"
                if started_over_s is not None
                else f"(the slowest answer took {max_latency_s:.1f} s, "
                f"{max_latency_s / delay:.1f} × the delay)"
            )
            + ": calls waited inside serve for a slot an earlier call held (answers came in "
            "waves): a pool or cap of provider connections bounds it"
        )
    else:
        bound_by = "the rate at which serve accepts calls"
        notes.append(
            f"only {in_flight} of {calls} calls were asleep at the provider at once: the burst "
            f"took {burst_seconds:.1f} s to answer, and a call accepted more than {delay:g} s "
            "after the first was answered had no company left; the rate at which serve accepts "
            "calls bounds it, not a limit below"
        )
    if serve_cpu_ms_per_call > 0:
        notes.append(
            f"serve spent {serve_cpu_ms_per_call:.2f} ms of CPU per call (accept, send, read, "
            f"settle, answer); the answers of a burst come back together, {delay:g} s after "
            f"their sends, and each must be read within the timeout's {timeout - delay:g} s "
            f"margin over the delay: of the order of "
            f"{int(margin_s * 1000 / serve_cpu_ms_per_call)} calls' work fits in it on "
            "one core, an estimate, not a measurement"
        )
    slowest = max_latency_s if provider_elapsed_max_s is None else provider_elapsed_max_s
    seen_by = "the caller" if provider_elapsed_max_s is None else "serve (its provider call)"
    margin = timeout - slowest
    notes.append(
        f"slowest answer {slowest:.2f} s as {seen_by} timed it, provider timeout "
        f"{timeout:g} s, provider delay {delay:g} s: {margin:+.2f} s to spare"
        + ("" if margin > 0 else " (calls past it are unknown outcomes: reconciled)")
    )
    return {
        "calls_allowed_by": limits,
        "nearest_limit": nearest,
        "bound_by": bound_by,
        "rss_per_call_kib": round(per_call_kib, 1),
        "notes": notes,
    }


def burst(
    target: Target, provider_url: str, serve_pid: int, calls: int, delay: float, tag: str
) -> tuple[dict[str, Any], Tally]:
    """N invokes at once, every answer waited for; what the provider and serve saw."""
    sleeping(provider_url, reset=True)
    tally = Tally()
    with Sampler(serve_pid, live_url=target.platform) as sampler:
        result, cpu = measure_window(
            serve_pid,
            lambda: run_burst(
                target.platform,
                sleeping_factory(target, SERVICE, tag, delay),
                clients=calls,
                check=tally,
            ),
        )
    asleep = sleeping(provider_url)
    latencies = sorted(result.latencies_ms)
    return {
        "calls": calls,
        "answered": result.answered,
        "connection_errors": result.errors,
        **tally.summary(),
        "seconds_first_connect_to_last_answer": round(result.seconds, 3),
        "latency_ms": {
            "min": round(latencies[0], 1) if latencies else None,
            "p50": round(result.percentile(50), 1),
            "p99": round(result.percentile(99), 1),
            "max": round(latencies[-1], 1) if latencies else None,
        },
        "provider_asleep_at_once": asleep["peak"],
        "serve_peak_rss_mib_sampled": round(sampler.peak_rss_kib / 1024, 1),
        "serve_peak_open_fds_sampled": sampler.peak_fds,
        "samples": sampler.samples,
        "serve_health_live_during": sampler.live_summary(),
        "serve_cpu_seconds": round(cpu or 0.0, 2),
        "serve_cpu_ms_per_call": round(1000 * (cpu or 0.0) / calls, 3),
        "load_generator_cpu_seconds": round(result.client_cpu_seconds, 2),
    }, tally


def run(options: Options, say: Any) -> dict[str, Any]:
    from mercato.db.runtime import Runtime
    from mercato.settings import Settings

    started = dt.datetime.now(dt.UTC)
    nofile = raise_nofile()
    most = max(options.calls)
    result: dict[str, Any] = {
        "started_at": started.isoformat(),
        "what": "calls one `mercato serve --workers 1` holds in flight to a provider that "
        "answers each call `delay` seconds after it arrives (issue 39)",
        "options": {
            "calls": list(options.calls),
            "delay": options.delay,
            "store": options.store,
            "provider_timeout": options.provider_timeout,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
            "rlimit_nofile": nofile,
            "kernel": kernel_limits(),
        },
    }
    workdir = Path(tempfile.mkdtemp(prefix=f"mercato-capacity-{options.store}-"))
    data_dir = workdir / "data"
    data_dir.mkdir()
    keep = False
    try:
        with database(options.store, workdir, options.pg_admin_url) as db_url:
            env = platform_env(db_url, data_dir)
            env["MERCATO_PROVIDER_MAX_IN_FLIGHT_CEILING"] = str(max(1024, most))
            env["MERCATO_MAX_IN_FLIGHT"] = str(max(4096, most))
            if options.provider_timeout is not None:
                env["MERCATO_PROVIDER_TIMEOUT_SECONDS"] = str(options.provider_timeout)
            settings = Settings(env="dev", data_dir=data_dir, database_url=db_url)
            timeout = options.provider_timeout or float(settings.provider_timeout_seconds)
            result["options"]["provider_timeout"] = timeout
            migrated = mercato("migrate", env=env)
            if migrated.returncode != 0:
                raise RuntimeError(f"migrate failed: {migrated.stderr[-2000:]}")
            runtime = Runtime.from_settings(settings)
            credential = "bench-" + secrets.token_urlsafe(24)
            provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
            provider_port, serve_port = free_port(), free_port()
            provider_args = [sys.executable, "-m", "bench.lean_provider"]
            provider_args += ["--port", str(provider_port)]
            serve_args = [sys.executable, "-m", "mercato", "serve", "--port", str(serve_port)]
            serve_args += ["--workers", "1"]
            try:
                with process(
                    provider_args, provider_env, workdir / "provider.log", provider_port
                ) as (provider_url, provider_pid):
                    seeded = seed(runtime, providers={SERVICE: provider_url}, credential=credential)
                    bulkhead = set_max_in_flight(env, connection_id(runtime, SERVICE), most)
                    result["bulkhead"] = bulkhead
                    if bulkhead["exit"] != 0:
                        say(f"note: no per-connection bulkhead here ({bulkhead['said']})")
                    with process(serve_args, env, workdir / "serve.log", serve_port) as (
                        serve_url,
                        serve_pid,
                    ):
                        target = Target(platform=serve_url, provider=provider_url, seeded=seeded)
                        idle_rss = status_kib(serve_pid, "VmRSS") or 0
                        idle_fds = open_fds(serve_pid) or 0
                        result["serve_idle"] = {
                            "rss_mib": round(idle_rss / 1024, 1),
                            "open_fds": idle_fds,
                            "rlimit_nofile": nofile_of(serve_pid),
                        }
                        bursts = []
                        offset = (workdir / "serve.log").stat().st_size
                        for index, calls in enumerate(options.calls):
                            say(f"[{options.store}] burst of {calls} calls of {options.delay:g} s")
                            tag = f"c{index}"
                            shown, tally = burst(
                                target, provider_url, serve_pid, calls, options.delay, tag
                            )
                            target.invoke_answers.update(tally.statuses)
                            sent, offset = provider_calls(workdir / "serve.log", offset)
                            shown["provider_calls_seen_by_serve"] = sent
                            shown["settlement"] = settlement = first_answers(
                                runtime, f"bench-{target.run_id}-{tag}-"
                            )
                            shown["settled_whole"] = settled_whole(shown)
                            max_latency = (shown["latency_ms"]["max"] or 0.0) / 1000
                            elapsed = sent["elapsed_ms_max"]
                            live = shown["serve_health_live_during"]["max_ms"]
                            shown["bounds"] = bounds(
                                calls=calls,
                                in_flight=shown["provider_asleep_at_once"],
                                settled_first=settlement["settled_on_first_answer"],
                                delay=options.delay,
                                timeout=timeout,
                                max_latency_s=max_latency,
                                provider_elapsed_max_s=None if elapsed is None else elapsed / 1000,
                                burst_seconds=shown["seconds_first_connect_to_last_answer"],
                                serve_cpu_ms_per_call=shown["serve_cpu_ms_per_call"],
                                live_max_s=None if live is None else live / 1000,
                                started_over_s=sent["started_over_s"],
                                serve_nofile=nofile_of(serve_pid) or nofile["soft"],
                                serve_base_fds=idle_fds,
                                provider_nofile=nofile_of(provider_pid) or nofile["soft"],
                                client_nofile=nofile["soft"],
                                ephemeral_ports=result["machine"]["kernel"]["ephemeral_ports"],
                                rss_base_kib=idle_rss,
                                rss_peak_kib=shown["serve_peak_rss_mib_sampled"] * 1024,
                                max_in_flight=most if bulkhead["exit"] == 0 else None,
                            )
                            say(f"[{options.store}] {line(shown)}")
                            bursts.append(shown)
                        result["bursts"] = bursts
                        whole = [b["calls"] for b in bursts if b["settled_whole"]]
                        result["largest_burst_settled_whole"] = max(whole, default=0)
                        hwm = status_kib(serve_pid, "VmHWM") or 0
                        result["serve_vmhwm_mib"] = round(hwm / 1024, 1)
                        result["serve_rss_under_1_gib"] = hwm < GIB_KIB
                    result["settlement"] = first_answers(runtime)
                    result["ledger"] = ledger_check(runtime, env, target)
            finally:
                runtime.db.dispose()
        result["machine"]["loadavg_at_end"] = os.getloadavg()
        result["passed"] = passed(result)
        keep = not result["passed"]
    finally:
        if keep:
            say(f"kept {workdir} (its logs and database)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    path = options.out_dir / f"capacity-{options.store}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    result["json_path"] = str(path)
    return result


def settled_whole(shown: dict[str, Any]) -> bool:
    """A burst's calls all answered 200, all asleep at the provider at once, and each settled
    on its first answer (one attempt, no reconciliation)."""
    return (
        shown["statuses"] == {"200": shown["calls"]}
        and shown["connection_errors"] == 0
        and shown["provider_asleep_at_once"] >= shown["calls"]
        and bool(shown["settlement"]["all_settled_on_first_answer"])
        and shown["settlement"]["invocations"] == shown["calls"]
    )


def passed(result: dict[str, Any]) -> bool:
    """Every burst settled whole (`settled_whole`), every call of the store settled on its
    first answer with none reconciled, the ledger balanced, and serve's RSS under 1 GiB."""
    whole = all(b.get("settled_whole") for b in result.get("bursts", []))
    return (
        whole
        and bool(result.get("settlement", {}).get("all_settled_on_first_answer"))
        and ledger_ok(result.get("ledger", {}))
        and bool(result.get("serve_rss_under_1_gib"))
    )


def line(shown: dict[str, Any]) -> str:
    latency = shown["latency_ms"]
    return (
        f"{shown['calls']} calls: {shown['provider_asleep_at_once']} asleep at the provider at "
        f"once; answers {shown['statuses']} {shown['problem_codes'] or ''}; latency p50 "
        f"{latency['p50']} ms, max {latency['max']} ms; serve peak RSS "
        f"{shown['serve_peak_rss_mib_sampled']} MiB, {shown['serve_peak_open_fds_sampled']} fds; "
        f"/health/live slowest {shown['serve_health_live_during']['max_ms']} ms; settled whole "
        f"{shown['settled_whole']}; bound by {shown['bounds']['bound_by']}"
    )


def _calls(value: str) -> tuple[int, ...]:
    try:
        calls = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("comma-separated whole numbers") from None
    if not calls or min(calls) < 1:
        raise argparse.ArgumentTypeError("at least one number, each 1 or more")
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--calls", type=_calls, default=(5000,), help="burst sizes, in order")
    parser.add_argument("--delay", type=float, default=8.0, help="seconds the provider sleeps")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--provider-timeout", type=float, default=None, help="MERCATO_PROVIDER_TIMEOUT_SECONDS"
    )
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON is written")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout")
    args = parser.parse_args(argv)
    if args.delay <= 0:
        parser.error("--delay: must be more than 0")
    if args.provider_timeout is not None and args.provider_timeout <= 0:
        parser.error("--provider-timeout: must be more than 0")
    options = Options(
        calls=args.calls,
        delay=args.delay,
        store=args.store,
        provider_timeout=args.provider_timeout,
        pg_admin_url=args.pg_admin_url,
        out_dir=args.out,
    )
    result = run(options, lambda message: print(message, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result))
    else:
        for shown in result.get("bursts", []):
            print(line(shown))
            for note in shown["bounds"]["notes"]:
                print(f"  {note}")
        print(
            f"largest burst settled whole: {result.get('largest_burst_settled_whole')}; serve "
            f"VmHWM {result.get('serve_vmhwm_mib')} MiB; {result.get('settlement')}"
        )
        print(f"result: {result['json_path']}; passed={result['passed']}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
