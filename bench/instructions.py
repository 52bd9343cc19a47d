"""Instructions per invoke of the serve process, counted by callgrind (issue 20).

A count of instructions does not depend on what else runs on the machine, so it compares two
versions of the web layer on a shared, loaded machine where CPU time and rates cannot. Per
store: a fresh database (migrated and seeded as the benchmark seeds it), the lean provider, then
each target in turn under `valgrind --tool=callgrind` with instrumentation off, one worker:
`serve` (`mercato serve --workers 1`) and `floor` (`bench/floor.py --workers 1`, the engine on
a bare route). Each is warmed up uninstrumented by `--warmup` invokes, then instrumented for
`--windows` windows of closed-loop load by `--clients` clients for `--seconds` seconds each;
the result is the instructions the process ran while instrumented, divided by the invokes it
answered (every answer must be a 200), in all and per window. A process needs a few hundred
invokes of warm-up: after about 100 its windows fell from 3.0 to 1.8 M instructions per
invoke, after 500-700 they agree within 0.5 %. What still moves with timing is
the work shared between calls in flight (PostgreSQL's grouped commits, the collector at many
clients), so compare versions at the same `--clients`.

With `--tree LABEL=PATH` (repeatable) the targets run the code of another checkout (its `src`
and top directory first on PYTHONPATH) instead of this one, alternated per round, so that two
versions are compared on the same database: e.g. `--tree base=/tmp/base --tree new=.`.

    python -m bench.instructions [--stores postgresql,sqlite] [--targets serve,floor]
        [--clients 2] [--warmup 500] [--seconds 10] [--windows 2] [--rounds 1]
        [--tree LABEL=PATH ...] [--keep]

Needs valgrind (`callgrind_control`) and the local PostgreSQL of the benchmark.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    HOST,
    SERVICE,
    Target,
    _live,
    database,
    free_port,
    invoke_factory,
    mercato,
    platform_env,
    process,
    seed,
    wait_until,
)
from bench.load import RequestFactory, run_load

_TOTALS = re.compile(rb"^totals:\s*(\d+)", re.MULTILINE)


def _command(target: str, port: int) -> list[str]:
    if target == "serve":
        return [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", "1"]
    return [sys.executable, "-m", "bench.floor", "--port", str(port), "--workers", "1"]


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _dumped_instructions(out_dir: Path, part: int) -> int:
    """The instruction total of the `part`-th dump `callgrind_control --dump` wrote in
    `out_dir` (the one written when the process exits has no part number)."""
    (dump,) = out_dir.glob(f"callgrind.out.*.{part}")
    found = _TOTALS.search(dump.read_bytes())
    if found is None:
        raise RuntimeError(f"no totals in {dump}")
    return int(found.group(1))


def fresh_factories(runner: Target, tag: str) -> Iterator[RequestFactory]:
    """A new invoke factory for each load: `run_load` numbers its requests from 0 every time,
    so one factory reused would repeat its Idempotency-Keys, and every load after the first
    would count replays, not fresh invokes."""
    for load in itertools.count():
        yield invoke_factory(runner, f"{tag}-{load}")


def measure(
    target: str,
    tree: Path | None,
    env: dict[str, str],
    runner: Target,
    *,
    clients: int,
    seconds: float,
    windows: int,
    warmup: int,
    workdir: Path,
    say: Any,
) -> dict[str, Any]:
    """Start `target` under callgrind, warm it, count `windows` windows of `seconds` of load
    each, stop it."""
    port = free_port()
    out_dir = Path(tempfile.mkdtemp(prefix=f"cg-{target}-", dir=workdir))
    run_env = dict(env)
    cwd = None
    if tree is not None:
        run_env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
        cwd = str(tree)
    args = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    args += [f"--callgrind-out-file={out_dir}/callgrind.out.%p"]
    args += _command(target, port)
    url = f"http://{HOST}:{port}"
    with (out_dir / "server.log").open("ab") as log:
        child = subprocess.Popen(args, env=run_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _live(url, child), f"{target} under valgrind", timeout=600)
            factories = fresh_factories(runner, f"{target}-{out_dir.name}")
            warmed = 0
            while warmed < warmup:  # counted in invokes: the rate under valgrind varies a lot
                load = run_load(url, next(factories), concurrency=clients, duration=2.0, warmup=0.0)
                warmed += load.answered
            _callgrind(child.pid, "--instr=on")
            statuses: Counter[int] = Counter()

            def check(status: int, _body: bytes) -> None:
                statuses[status] += 1

            answered: list[int] = []
            for _ in range(windows):
                _callgrind(child.pid, "--zero")
                result = run_load(
                    url,
                    next(factories),
                    concurrency=clients,
                    duration=seconds,
                    warmup=0.0,
                    check=check,
                )
                _callgrind(child.pid, "--dump")
                answered.append(result.answered)
            _callgrind(child.pid, "--instr=off")
        finally:
            child.terminate()
            child.wait(60)
    if set(statuses) != {200}:
        raise RuntimeError(f"{target}: answers {dict(statuses)} (see {out_dir}/server.log)")
    counted = [_dumped_instructions(out_dir, n + 1) for n in range(windows)]
    per = [round(i / a) for i, a in zip(counted, answered, strict=True)]
    total = round(sum(counted) / sum(answered))
    shown = " ".join(f"{p / 1e6:.3f}" for p in per)
    say(f"  {target}: {sum(answered)} invokes, {total / 1e6:.3f} M instr/invoke ({shown})")
    return {"invokes": sum(answered), "per_invoke": total, "windows": per}


@contextmanager
def seeded_store(
    store: str, workdir: Path, pg_admin_url: str
) -> Iterator[tuple[dict[str, str], Target, str]]:
    """A fresh database of `store`, migrated and seeded as the benchmark seeds it, with the lean
    provider running: the platform's environment, the seeded caller and provider as a
    `Target`, and the database URL (used by this module and `bench.replays`)."""
    from mercato.db.runtime import Runtime
    from mercato.settings import Settings

    data_dir = workdir / "data"
    data_dir.mkdir(parents=True)
    with database(store, workdir, pg_admin_url) as db_url:
        env = platform_env(db_url, data_dir)
        migrated = mercato("migrate", env=env)
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed: {migrated.stderr[-2000:]}")
        credential = "bench-" + os.urandom(18).hex()
        provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
        provider_port = free_port()
        provider_args = [sys.executable, "-m", "bench.lean_provider", "--port", str(provider_port)]
        runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))
        try:
            with process(provider_args, provider_env, workdir / "provider.log", provider_port) as (
                provider_url,
                _pid,
            ):
                seeded = seed(runtime, providers={SERVICE: provider_url}, credential=credential)
                yield env, Target(platform="", provider=provider_url, seeded=seeded), db_url
        finally:
            runtime.db.dispose()


def run_store(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    say = options.say
    rows: list[dict[str, Any]] = []
    with seeded_store(store, workdir, options.pg_admin_url) as (env, runner, _db_url):
        for round_ in range(options.rounds):
            for label, tree in options.trees:
                for target in options.targets:
                    say(f"[{store}] round {round_ + 1} {label}")
                    row = measure(
                        target,
                        tree,
                        env,
                        runner,
                        clients=options.clients,
                        seconds=options.seconds,
                        windows=options.windows,
                        warmup=options.warmup,
                        workdir=workdir,
                        say=say,
                    )
                    rows.append(
                        {"store": store, "round": round_ + 1, "tree": label}
                        | {"target": target}
                        | row
                    )
    return rows


def _tree(text: str) -> tuple[str, Path | None]:
    label, _, path = text.partition("=")
    return label, Path(path).resolve() if path else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("--stores", default="postgresql,sqlite")
    parser.add_argument("--targets", default="serve,floor")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=500, help="invokes, not counted")
    parser.add_argument("--windows", type=int, default=2, help="counted windows per process")
    parser.add_argument("--tree", action="append", type=_tree, default=[])
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    options = parser.parse_args()
    options.targets = options.targets.split(",")
    options.trees = options.tree or [("this", None)]
    options.say = lambda m: print(m, file=sys.stderr, flush=True)
    print_rows(options, "mercato-instr-", run_store, keep=options.keep)


def print_rows(
    options: argparse.Namespace,
    prefix: str,
    run_store: Callable[[str, argparse.Namespace, Path], list[dict[str, Any]]],
    *,
    keep: bool = False,
) -> None:
    """`run_store` for each of `options.stores`, each in a fresh work directory (removed after
    it unless `keep`), then every row as one JSON line (used by `bench.replays` too)."""
    rows: list[dict[str, Any]] = []
    for store in options.stores.split(","):
        workdir = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            rows += run_store(store, options, workdir)
        finally:
            if keep:
                print(f"kept {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
