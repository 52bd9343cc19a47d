"""Instructions (callgrind) or CPU (/proc) per replay of the serve process (issue 20).

The replay counterpart of `bench.instructions`: per store, a fresh database seeded as the
benchmark seeds it and the lean provider; then, per tree and round (alternated), `mercato serve
--workers 1` on that tree answers one invoke with a fresh Idempotency-Key, and is then sent that
same call again and again by `--clients` closed-loop clients (every answer must be a 200).

- `--mode instr`: serve runs under `valgrind --tool=callgrind` with instrumentation off, is
  warmed by `--warmup` replays, then counted for `--windows` windows of `--seconds` each
  (`callgrind_control --zero/--dump`): instructions per replay, in all and per window.
- `--mode cpu`: serve runs bare; per window the user+system CPU of serve and, on PostgreSQL,
  of the database's server processes (`pg_stat_activity` of the bench database), per replay.

With `--profile PREFIX` (cpu mode), py-spy records serve during the first window of each
process, as raw collapsed stacks in `PREFIX-<tree>-<key>.txt` (py-spy from PyPI, in the venv).

With `--workers N` (cpu mode), serve runs N workers and the CPU is the whole process tree's.

    python -m bench.replays [--stores postgresql,sqlite] [--mode instr|cpu] [--clients 2]
        [--workers 1]
        [--warmup 500] [--seconds 5] [--windows 2] [--rounds 1] [--tree LABEL=PATH ...]
        [--profile PREFIX] [--keep]

With `--keep`, the work directory (in instr mode, callgrind's dumps per window, for
`callgrind_annotate --inclusive=yes`) is kept and named on stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.harness import (
    DEFAULT_PG_ADMIN,
    HOST,
    INVOKE_PATH,
    Target,
    _json_headers,
    _live,
    _tree_cpu_seconds,
    free_port,
    replay_factory,
    wait_until,
)
from bench.instructions import (
    _callgrind,
    _dumped_instructions,
    _tree,
    print_rows,
    seeded_store,
)
from bench.load import run_load


def _user_sys(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process `pid` (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / tick, int(fields[12]) / tick


def _pg_backends(db_url: str) -> list[int]:
    import psycopg

    name = db_url.rsplit("/", 1)[1]
    with psycopg.connect(DEFAULT_PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def measure(
    tree: Path | None,
    env: dict[str, str],
    runner: Target,
    db_url: str,
    options: argparse.Namespace,
    workdir: Path,
    label: str,
) -> dict[str, Any]:
    port = free_port()
    out_dir = Path(tempfile.mkdtemp(prefix="cg-replay-", dir=workdir))
    run_env = dict(env)
    cwd = None
    if tree is not None:
        run_env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
        cwd = str(tree)
    args: list[str] = []
    if options.mode == "instr":
        args = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        args += [f"--callgrind-out-file={out_dir}/callgrind.out.%p"]
    workers = str(options.workers)
    args += [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", workers]
    url = f"http://{HOST}:{port}"
    key = f"replay-{label}-{out_dir.name}"
    factory = replay_factory(runner, key)
    statuses: Counter[int] = Counter()

    def check(status: int, _body: bytes) -> None:
        statuses[status] += 1

    per: list[float] = []
    pg_per: list[float] = []
    sys_per: list[float] = []
    rates: list[float] = []
    client_per: list[float] = []
    answered_all = 0
    with (out_dir / "server.log").open("ab") as log:
        child = subprocess.Popen(args, env=run_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _live(url, child), "serve", timeout=600)
            first = httpx.post(
                url + INVOKE_PATH,
                content=b'{"job":"bench","n":0}',
                headers=_json_headers(runner.seeded.api_key, key),
                timeout=60,
            )
            if first.status_code != 200:
                raise RuntimeError(f"first call: {first.status_code} {first.text}")
            warmed = 0
            while warmed < options.warmup:
                load = run_load(url, factory, concurrency=options.clients, duration=1.0, warmup=0.0)
                warmed += load.answered
            if options.mode == "instr":
                _callgrind(child.pid, "--instr=on")
            for n in range(options.windows):
                if options.mode == "instr":
                    _callgrind(child.pid, "--zero")
                else:
                    pgs = _pg_backends(db_url) if "postgresql" in db_url else []
                    before = _tree_cpu_seconds(child.pid)
                    split = _user_sys(child.pid)
                    pg_before = sum(_tree_cpu_seconds(p) for p in pgs)
                spy = None
                if options.profile and n == 0:
                    spy = subprocess.Popen(
                        [
                            options.py_spy,
                            "record",
                            "--subprocesses",  # serve --workers N: the workers, not the supervisor
                            "-p",
                            str(child.pid),
                            "-r",
                            "200",
                            "-d",
                            str(int(options.seconds)),
                            "-f",
                            "raw",
                            "-o",
                            f"{options.profile}-{label}-{runner.seeded.api_key[-4:]}.txt",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                result = run_load(
                    url,
                    factory,
                    concurrency=options.clients,
                    duration=options.seconds,
                    warmup=0.0,
                    check=check,
                )
                answered_all += result.answered
                rates.append(result.rate)
                client_per.append(1e6 * result.client_cpu_seconds / max(result.answered, 1))
                if spy is not None:
                    spy.wait()
                if options.mode == "instr":
                    _callgrind(child.pid, "--dump")
                    per.append(_dumped_instructions(out_dir, n + 1) / result.answered)
                else:
                    spent = _tree_cpu_seconds(child.pid) - before
                    per.append(1e6 * spent / result.answered)  # µs
                    after = _user_sys(child.pid)
                    sys_per.append(1e6 * (after[1] - split[1]) / result.answered)
                    if pgs:
                        pg_spent = sum(_tree_cpu_seconds(p) for p in pgs) - pg_before
                        pg_per.append(1e6 * pg_spent / result.answered)
            if options.mode == "instr":
                _callgrind(child.pid, "--instr=off")
        finally:
            child.terminate()
            child.wait(60)
    if set(statuses) != {200}:
        raise RuntimeError(f"answers {dict(statuses)} (see {out_dir}/server.log)")
    unit = "M instr" if options.mode == "instr" else "µs CPU"
    scale = 1e6 if options.mode == "instr" else 1.0
    shown = " ".join(f"{p / scale:.3f}" for p in per)
    line = f"  {label}: {answered_all} replays, {unit}/replay: {shown}"
    line += ", replays/s: " + " ".join(f"{r:.0f}" for r in rates)
    line += ", client µs/replay: " + " ".join(f"{c:.1f}" for c in client_per)
    if sys_per:
        line += "  (of which system: " + " ".join(f"{p:.1f}" for p in sys_per) + ")"
    if pg_per:
        line += "  | postgres µs/replay: " + " ".join(f"{p:.1f}" for p in pg_per)
    print(line, file=sys.stderr, flush=True)
    return {
        "replays": answered_all,
        "per_replay": per,
        "pg_per_replay": pg_per,
        "sys_per_replay": sys_per,
        "rates": rates,
        "client_per_replay": client_per,
    }


def run_store(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with seeded_store(store, workdir, options.pg_admin_url) as (env, runner, db_url):
        for round_ in range(options.rounds):
            for label, tree in options.trees:
                print(f"[{store}] round {round_ + 1} {label}", file=sys.stderr)
                row = measure(tree, env, runner, db_url, options, workdir, label)
                rows.append({"store": store, "round": round_ + 1, "tree": label} | row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replays")
    parser.add_argument("--stores", default="postgresql,sqlite")
    parser.add_argument("--mode", choices=("instr", "cpu"), default="instr")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="serve --workers (cpu mode)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=500, help="replays, not counted")
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--tree", action="append", type=_tree, default=[])
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--profile", help="py-spy raw profile of the first window to PREFIX-*")
    parser.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (callgrind's dumps)"
    )
    options = parser.parse_args()
    if options.mode == "instr" and options.workers != 1:
        parser.error("--workers: instr mode counts one serve process (--workers 1)")
    options.trees = options.tree or [("this", None)]
    print_rows(options, "mercato-replays-", run_store, keep=options.keep)


if __name__ == "__main__":
    main()
