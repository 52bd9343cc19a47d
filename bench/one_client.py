"""The p50 one client adds, alternated between versions on one database (issue 20).

The benchmark's one-client figure (`python -m bench`: the lean provider called directly by one
client, then invoke through `mercato serve` by one client, the difference of their p50s) for
comparing versions on a shared machine: per store, a fresh database seeded as the benchmark
seeds it and the lean provider (`bench.instructions.seeded_store`); then, per round and per
tree (alternated), `mercato serve --workers W` on that tree is started, warmed by `--warmup`
invokes, and measured in `--windows` windows of: the provider alone (`--seconds`), invoke
(`--seconds`). Each window's added p50 is invoke's p50 minus the provider's p50 of the same
window; a tree's figure per round is the median of its windows. With `--leanest`, the leanest
path (`bench.leanest`, of the same tree) is measured the same way after serve.

Also per window: serve's CPU (its process tree) per invoke, and on PostgreSQL the database's
server processes' CPU per invoke.

    python -m bench.one_client [--stores postgresql] [--workers 2] [--seconds 5]
        [--windows 3] [--rounds 3] [--warmup 300] [--clients 1] [--leanest]
        [--paired] [--calls 1000] [--tree LABEL=PATH ...]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    HOST,
    Target,
    _live,
    _tree_cpu_seconds,
    direct_factory,
    free_port,
    invoke_factory,
    wait_until,
)
from bench.instructions import _tree, print_rows, seeded_store
from bench.load import _encode, _read_response, run_load
from bench.replays import _pg_backends


def _command(what: str, port: int, workers: int) -> list[str]:
    module = ["mercato", "serve"] if what == "serve" else ["bench.leanest"]
    return [sys.executable, "-m", *module, "--port", str(port), "--workers", str(workers)]


def measure(
    what: str,
    tree: Path | None,
    env: dict[str, str],
    runner: Target,
    db_url: str,
    options: argparse.Namespace,
    workdir: Path,
    label: str,
) -> dict[str, Any]:
    """Start `what` (serve or leanest) on `tree`, warm it, measure its windows, stop it."""
    port = free_port()
    run_env = dict(env)
    cwd = None
    if tree is not None:
        run_env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
        cwd = str(tree)
    url = f"http://{HOST}:{port}"
    tag = f"{label}-{what}-{port}"
    added: list[float] = []
    p50s: list[float] = []
    rates: list[float] = []
    direct: list[float] = []
    cpu: list[float] = []
    pg_cpu: list[float] = []
    statuses: dict[int, int] = {}
    with (workdir / f"{what}-{label}.log").open("ab") as log:
        child = subprocess.Popen(
            _command(what, port, options.workers),
            env=run_env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: _live(url, child), what, timeout=120)
            warmed = 0
            n = 0
            while warmed < options.warmup:
                load = run_load(
                    url, invoke_factory(runner, f"{tag}-w{n}"), concurrency=2, duration=1.0
                )
                warmed += load.answered
                n += 1
            for window in range(options.windows):
                alone = run_load(
                    runner.provider,
                    direct_factory(runner, f"{tag}-d{window}"),
                    concurrency=1,
                    duration=options.seconds,
                )
                pgs = _pg_backends(db_url) if "postgresql" in db_url else []
                before = _tree_cpu_seconds(child.pid)
                pg_before = sum(_tree_cpu_seconds(p) for p in pgs)
                result = run_load(
                    url,
                    invoke_factory(runner, f"{tag}-i{window}"),
                    concurrency=options.clients,
                    duration=options.seconds,
                )
                spent = _tree_cpu_seconds(child.pid) - before
                pg_spent = sum(_tree_cpu_seconds(p) for p in pgs) - pg_before
                for status, count in result.statuses.items():
                    statuses[status] = statuses.get(status, 0) + count
                p50 = result.percentile(50)
                base = alone.percentile(50)
                rates.append(result.rate)
                p50s.append(p50)
                direct.append(base)
                added.append(p50 - base)
                cpu.append(1000 * spent / max(result.answered, 1))
                if pgs:
                    pg_cpu.append(1000 * pg_spent / max(result.answered, 1))
        finally:
            child.terminate()
            child.wait(60)
    if set(statuses) != {200}:
        raise RuntimeError(f"{what} {label}: answers {statuses}")
    row = {
        "what": what,
        "added_p50_ms": round(statistics.median(added), 3),
        "added_windows": [round(a, 3) for a in added],
        "p50_ms": [round(p, 3) for p in p50s],
        "invokes_per_s": [round(r, 1) for r in rates],
        "direct_p50_ms": [round(p, 3) for p in direct],
        "cpu_ms_per_invoke": [round(c, 3) for c in cpu],
        "pg_cpu_ms_per_invoke": [round(c, 3) for c in pg_cpu],
    }
    shown = " ".join(f"{a:+.3f}" for a in added)
    line = f"  {label} {what}: added p50 {row['added_p50_ms']:+.3f} ms ({shown})"
    line += " /s " + " ".join(f"{r:.0f}" for r in rates)
    line += " cpu " + " ".join(f"{c:.3f}" for c in cpu)
    if pg_cpu:
        line += " | pg " + " ".join(f"{c:.3f}" for c in pg_cpu)
    print(line, file=sys.stderr, flush=True)
    return row


async def _paired_calls(urls: list[str], runner: Target, tag: str, calls: int) -> list[list[float]]:
    """`calls` invokes to each of `urls` in turn (one client: a, b, a, b, ...), each on its own
    keep-alive connection: the latencies (ms) per URL, call by call."""
    streams = []
    for url in urls:
        host, _, port = url.removeprefix("http://").partition(":")
        streams.append((f"{host}:{port}", *await asyncio.open_connection(host, int(port))))
    factory = invoke_factory(runner, tag)
    latencies: list[list[float]] = [[] for _ in urls]
    for n in range(calls):
        for index, (hostport, reader, writer) in enumerate(streams):
            method, path, headers, body = factory(index, n)
            began = time.perf_counter()
            writer.write(_encode(hostport, method, path, headers, body))
            status, _payload, _close = await _read_response(reader)
            latencies[index].append((time.perf_counter() - began) * 1000.0)
            if status != 200:
                raise RuntimeError(f"{urls[index]}: answered {status}")
    for _hostport, _reader, writer in streams:
        writer.close()
    return latencies


def run_paired(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Every tree's serve at once; one client sends each its invoke in turn, call after call,
    so that the trees share every moment of the machine's load (`--paired`)."""
    rows: list[dict[str, Any]] = []
    with (
        seeded_store(store, workdir, options.pg_admin_url) as (env, runner, _db_url),
        ExitStack() as stack,
    ):
        urls = []
        started = [("serve", label, tree) for label, tree in options.trees]
        if options.leanest:  # the leanest path of the first tree, taking its turn last
            started.append(("leanest", f"{options.trees[0][0]}-leanest", options.trees[0][1]))
        for what, label, tree in started:
            port = free_port()
            run_env = dict(env)
            cwd = None
            if tree is not None:
                run_env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
                cwd = str(tree)
            log = stack.enter_context((workdir / f"serve-{label}.log").open("ab"))
            child = subprocess.Popen(
                _command(what, port, options.workers),
                env=run_env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(child.wait, 60)
            stack.callback(child.terminate)
            url = f"http://{HOST}:{port}"
            wait_until(functools.partial(_live, url, child), "serve", timeout=120)
            urls.append(url)
        for url in urls:
            run_load(url, invoke_factory(runner, f"w-{url[-5:]}"), concurrency=2, duration=2.0)
        for round_ in range(options.rounds):
            alone = run_load(
                runner.provider,
                direct_factory(runner, f"d{round_}"),
                concurrency=1,
                duration=options.seconds,
            )
            base = alone.percentile(50)
            got = asyncio.run(_paired_calls(urls, runner, f"p{round_}", options.calls))
            first = got[0]
            for (_what, label, _tree), latencies in zip(started, got, strict=True):
                diffs = [b - a for a, b in zip(first, latencies, strict=True)]
                row = {
                    "store": store,
                    "round": round_ + 1,
                    "tree": label,
                    "calls": len(latencies),
                    "added_p50_ms": round(statistics.median(latencies) - base, 3),
                    "p50_ms": round(statistics.median(latencies), 3),
                    "direct_p50_ms": round(base, 3),
                    "paired_median_diff_ms": round(statistics.median(diffs), 3),
                }
                rows.append(row)
                print(
                    f"  round {round_ + 1} {label}: added p50 {row['added_p50_ms']:+.3f} ms"
                    f" (p50 {row['p50_ms']:.3f}, provider {base:.3f}); median of the paired"
                    f" differences from {options.trees[0][0]}: {row['paired_median_diff_ms']:+.3f}",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def run_store(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    targets = ["serve", "leanest"] if options.leanest else ["serve"]
    with seeded_store(store, workdir, options.pg_admin_url) as (env, runner, db_url):
        for round_ in range(options.rounds):
            for label, tree in options.trees:
                for what in targets:
                    print(f"[{store}] round {round_ + 1} {label} {what}", file=sys.stderr)
                    row = measure(what, tree, env, runner, db_url, options, workdir, label)
                    rows.append({"store": store, "round": round_ + 1, "tree": label} | row)
    medians: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        medians.setdefault((row["tree"], row["what"]), []).append(row["added_p50_ms"])
    for (label, what), values in medians.items():
        shown = " ".join(f"{v:+.3f}" for v in values)
        print(
            f"[{store}] {label} {what}: median added p50 {statistics.median(values):+.3f} ms"
            f" (rounds {shown})",
            file=sys.stderr,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.one_client")
    parser.add_argument("--stores", default="postgresql")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--clients", type=int, default=1, help="invoke's clients (the provider's: always 1)"
    )
    parser.add_argument("--warmup", type=int, default=300, help="invokes, not measured")
    parser.add_argument("--leanest", action="store_true", help="measure bench.leanest too")
    parser.add_argument(
        "--paired", action="store_true", help="every tree at once, one client taking turns"
    )
    parser.add_argument("--calls", type=int, default=1000, help="per tree and round (--paired)")
    parser.add_argument("--tree", action="append", type=_tree, default=[])
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    options = parser.parse_args()
    options.trees = options.tree or [("this", None)]
    print_rows(options, "mercato-one-client-", run_paired if options.paired else run_store)


if __name__ == "__main__":
    main()
