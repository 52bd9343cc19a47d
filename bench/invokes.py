"""Fresh invokes per second and serve CPU per invoke, trees alternated on one database (issue 20).

The rate counterpart of `bench.instructions`: per store, one fresh database seeded as the
benchmark seeds it and the lean provider (`seeded_store`); then, per round, each `--tree` in
turn starts each of `--targets` (`serve`: `mercato serve`, `floor`: `bench/floor.py`,
`leanest`: `bench/leanest.py`) with `--workers`, warms it for `--warmup` seconds, and loads it
for `--windows` windows of `--seconds` with `--clients` closed-loop clients, every call with a
fresh Idempotency-Key (every answer must be a 200). Per window: invokes/s, p50 and the CPU the
process tree spent per invoke (and of it, system CPU). On a shared machine only the
alternation makes two trees (or targets) comparable.

    python -m bench.invokes [--stores sqlite] [--targets serve,floor,leanest] [--workers 2]
        [--clients 64] [--warmup 3] [--seconds 8] [--windows 2] [--rounds 3]
        [--tree LABEL=PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    HOST,
    Target,
    _live,
    _tree_cpu_seconds,
    free_port,
    measured,
    wait_until,
)
from bench.instructions import _tree, fresh_factories, print_rows, seeded_store
from bench.load import run_load


def _command(target: str, port: int, workers: int) -> list[str]:
    module = ["mercato", "serve"] if target == "serve" else [f"bench.{target}"]
    return [sys.executable, "-m", *module, "--port", str(port), "--workers", str(workers)]


def measure(
    target: str,
    tree: Path | None,
    env: dict[str, str],
    runner: Target,
    options: argparse.Namespace,
    log: Path,
) -> dict[str, Any]:
    """Start the target on `tree`, warm it, load it for each window, stop it."""
    port = free_port()
    run_env, cwd = dict(env), None
    if tree is not None:
        run_env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
        cwd = str(tree)
    url = f"http://{HOST}:{port}"
    statuses: Counter[int] = Counter()

    def check(status: int, _body: bytes) -> None:
        statuses[status] += 1

    windows = []
    with log.open("ab") as out:
        args = _command(target, port, options.workers)
        child = subprocess.Popen(args, env=run_env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _live(url, child), target, timeout=120)
            factories = fresh_factories(runner, f"{target}-{port}")
            run_load(url, next(factories), concurrency=options.clients, duration=options.warmup)
            for _ in range(options.windows):
                factory = next(factories)
                system = _tree_cpu_seconds(child.pid, system_only=True)
                windows.append(
                    measured(
                        child.pid,
                        lambda factory=factory: run_load(  # type: ignore[misc]
                            url,
                            factory,
                            concurrency=options.clients,
                            duration=options.seconds,
                            warmup=0.0,
                            check=check,
                        ),
                    )
                )
                system = _tree_cpu_seconds(child.pid, system_only=True) - system
                windows[-1]["sys_ms"] = round(1000 * system / max(windows[-1]["answered"], 1), 3)
        finally:
            child.terminate()
            child.wait(60)
    if set(statuses) != {200}:
        raise RuntimeError(f"answers {dict(statuses)} (see {log})")
    rates = [round(w["_rate"]) for w in windows]
    cpu = [w["cpu_ms_per_request"] for w in windows]
    p50 = [round(w["_p50"], 1) for w in windows]
    return {"rates": rates, "cpu_ms": cpu, "sys_ms": [w["sys_ms"] for w in windows], "p50_ms": p50}


def run_store(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs = [(label, tree, target) for label, tree in options.trees for target in options.targets]
    with seeded_store(store, workdir, options.pg_admin_url) as (env, runner, _db_url):
        for round_ in range(options.rounds):
            for label, tree, target in runs:
                row = measure(target, tree, env, runner, options, workdir / f"{label}.log")
                print(
                    f"[{store}] round {round_ + 1} {label} {target}: invokes/s {row['rates']}, "
                    f"CPU ms/invoke {row['cpu_ms']} (system {row['sys_ms']}), "
                    f"p50 ms {row['p50_ms']}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(
                    {"store": store, "round": round_ + 1, "tree": label, "target": target} | row
                )
    for label, _path, target in runs:
        mine = [r for r in rows if r["tree"] == label and r["target"] == target]
        rates = [x for r in mine for x in r["rates"]]
        cpu = [x for r in mine for x in r["cpu_ms"]]
        print(
            f"[{store}] {label} {target}: median {statistics.median(rates)} invokes/s, "
            f"{statistics.median(cpu):.3f} ms CPU/invoke",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.invokes")
    parser.add_argument("--stores", default="sqlite")
    parser.add_argument("--targets", default="serve", help="serve, floor, leanest (comma list)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds, not counted")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", type=_tree, default=[])
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    options = parser.parse_args()
    options.trees = options.tree or [("this", None)]
    options.targets = options.targets.split(",")
    print_rows(options, "mercato-invokes-", run_store)


if __name__ == "__main__":
    main()
