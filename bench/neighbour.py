"""The noisy neighbour (issue 39): a flood of slow calls to one provider beside a steady load
on another, through one `mercato serve`; the second's calls/s and p50 against the same load
alone, in the same run.

    python -m bench.neighbour [--stores sqlite,postgresql] [--flood 150] [--flood-sleep 5]
        [--clients 8] [--window 10] [--rounds 3] [--limit 64] [--out DIR] [--json]

Per store, a fresh database, two lean providers (`bench.lean_provider`, each its own process on
its own connection: the slow one `bench.slow`, the quick one `bench.quick`) and `mercato serve
--workers 1` (one process: the bulkhead is per process). `--rounds` rounds, each two windows of
`--window` seconds, one right after the other (alternated like the replay ratio, decision 0507,
so drift in the machine falls on both sides):

- **alone**: `--clients` closed-loop clients invoke the quick provider;
- **flooded**: first `--flood` clients each invoke the slow provider (it answers `--flood-sleep`
  seconds later) once per `--flood-sleep` seconds, a refused call not sent again before its turn
  (decision 0535); once the slow provider has as many calls asleep as its connection admits
  (its own count), the same quick load as alone is measured; then the flood stops and its last
  calls are answered before the next round.

Reported: each side's calls/s and p50 (windows merged), their ratios (flooded over alone; the
target is within 20 %), the CPU seconds serve spent on each side (over the same wall time: what
the flood's own requests cost it shows as the difference), the flood's answers by status and
problem code (how many were refused `503 PROVIDER_BUSY`, and whether each carried `retryAfter`),
the most calls the slow provider had asleep at once, and the ledger check. Exits 1 when the quick
load missed the target, the ledger check fails or a quick call was not answered 200.
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
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    RESULTS,
    Target,
    Window,
    alternate,
    database,
    free_port,
    ledger_check,
    ledger_ok,
    measure_window,
    mercato,
    platform_env,
    process,
    seed,
    wait_until,
)
from bench.load import LoadResult, run_load
from bench.slow import Tally, sleeping, sleeping_factory

SLOW_SERVICE = "bench.slow"
QUICK_SERVICE = "bench.quick"
DEFAULT_LIMIT = 64  # MERCATO_PROVIDER_MAX_IN_FLIGHT's default (DESIGN §7)
WITHIN = 0.20  # the target: the quick load's calls/s and p50 within 20 % of alone


@dataclass
class Options:
    stores: tuple[str, ...] = ("sqlite", "postgresql")
    flood: int = 150
    flood_sleep: float = 5.0
    clients: int = 8
    window: float = 10.0
    rounds: int = 3
    limit: int = DEFAULT_LIMIT
    pg_admin_url: str = DEFAULT_PG_ADMIN
    out_dir: Path = RESULTS
    say: Callable[[str], None] = field(default=lambda m: print(m, file=sys.stderr, flush=True))


def verdict(
    alone: dict[str, Any], flooded: dict[str, Any], within: float = WITHIN
) -> dict[str, Any]:
    """The quick load flooded against alone: calls/s ratio (flooded / alone, at least 1 −
    `within` to pass) and p50 ratio (flooded / alone, at most 1 + `within`)."""
    rate = flooded["rate"] / alone["rate"] if alone["rate"] else None
    p50 = flooded["p50_ms"] / alone["p50_ms"] if alone["p50_ms"] else None
    return {
        "rate_ratio": None if rate is None else round(rate, 4),
        "p50_ratio": None if p50 is None else round(p50, 4),
        "within": within,
        "passed": rate is not None and p50 is not None and rate >= 1 - within and p50 <= 1 + within,
    }


class Flood:
    """The slow provider's flood, in a thread of its own (its own event loop): `clients` paced
    clients until `stop()`; `start()` returns once the slow provider has `fill` calls asleep."""

    def __init__(
        self, target: Target, slow_url: str, *, clients: int, sleep: float, tag: str
    ) -> None:
        self.target, self.slow_url = target, slow_url
        self.clients, self.sleep, self.tag = clients, sleep, tag
        self.tally = Tally()
        self.halt = threading.Event()
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result = run_load(
                self.target.platform,
                sleeping_factory(self.target, SLOW_SERVICE, self.tag, self.sleep),
                concurrency=self.clients,
                duration=3600.0,
                warmup=0.0,
                check=self.tally,
                period=self.sleep,
                stop=self.halt,
            )
        except BaseException as error:  # handed to the measuring thread
            self.error = error

    def start(self, fill: int) -> None:
        sleeping(self.slow_url, reset=True)
        self.thread.start()

        def filled() -> bool:
            if self.error is not None:
                raise RuntimeError(f"the flood failed: {self.error!r}")
            return sleeping(self.slow_url)["now"] >= fill

        wait_until(filled, f"{fill} slow calls asleep", timeout=60)

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        self.thread.join()
        if self.error is not None:
            raise RuntimeError(f"the flood failed: {self.error!r}")
        asleep = sleeping(self.slow_url)
        return {
            **self.tally.summary(),
            "connection_errors": self.result.errors if self.result else None,
            "slow_provider_asleep_at_once": asleep["peak"],
        }


def run_store(store: str, options: Options, workdir: Path) -> dict[str, Any]:
    from mercato.db.runtime import Runtime
    from mercato.settings import Settings

    say = options.say
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True)
    result: dict[str, Any] = {"store": store}
    with database(store, workdir, options.pg_admin_url) as db_url:
        env = platform_env(db_url, data_dir)
        env["MERCATO_PROVIDER_MAX_IN_FLIGHT"] = str(options.limit)
        migrated = mercato("migrate", env=env)
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed: {migrated.stderr[-2000:]}")
        runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))
        credential = "bench-" + secrets.token_urlsafe(24)
        provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
        slow_port, quick_port, serve_port = free_port(), free_port(), free_port()

        def provider_args(port: int) -> list[str]:
            return [sys.executable, "-m", "bench.lean_provider", "--port", str(port)]

        serve_args = [sys.executable, "-m", "mercato", "serve", "--port", str(serve_port)]
        serve_args += ["--workers", "1"]
        try:
            with (
                process(
                    provider_args(slow_port), provider_env, workdir / "slow.log", slow_port
                ) as (slow_url, _slow_pid),
                process(
                    provider_args(quick_port), provider_env, workdir / "quick.log", quick_port
                ) as (quick_url, quick_pid),
            ):
                seeded = seed(
                    runtime,
                    providers={SLOW_SERVICE: slow_url, QUICK_SERVICE: quick_url},
                    credential=credential,
                )
                with process(serve_args, env, workdir / "serve.log", serve_port) as (
                    serve_url,
                    serve_pid,
                ):
                    target = Target(platform=serve_url, provider=quick_url, seeded=seeded)
                    target.platform_pid, target.provider_pid = serve_pid, quick_pid
                    quick_tally = Tally()
                    floods: list[dict[str, Any]] = []

                    def quick(index: int, seconds: float, side: str) -> Window:
                        factory = sleeping_factory(target, QUICK_SERVICE, f"q{side}{index}", 0)
                        return measure_window(
                            serve_pid,
                            lambda: run_load(
                                serve_url,
                                factory,
                                concurrency=options.clients,
                                duration=seconds,
                                check=quick_tally,
                            ),
                        )

                    def alone(index: int, seconds: float) -> Window:
                        say(f"[{store}] round {index + 1}: the quick provider alone")
                        return quick(index, seconds, "a")

                    def flooded(index: int, seconds: float) -> Window:
                        say(
                            f"[{store}] round {index + 1}: {options.flood} slow callers, "
                            "then the quick provider beside them"
                        )
                        flood = Flood(
                            target,
                            slow_url,
                            clients=options.flood,
                            sleep=options.flood_sleep,
                            tag=f"f{index}",
                        )
                        flood.start(min(options.flood, options.limit))
                        try:
                            window = quick(index, seconds, "f")
                        finally:
                            floods.append(flood.stop())
                        return window

                    alternated = alternate(
                        alone,
                        flooded,
                        rounds=options.rounds,
                        seconds=options.window * options.rounds,
                    )
                    result["alone"] = _public(alternated.base)
                    result["flooded"] = _public(alternated.measured)
                    result["rounds"] = [
                        {"alone_rate": r["provider"], "flooded_rate": r["replays"], **flood}
                        for r, flood in zip(alternated.rounds, floods, strict=True)
                    ]
                    result["quick_answers"] = quick_tally.summary()
                    result["verdict"] = verdict(result["alone"], result["flooded"])
                    result["flood"] = {
                        "provider_busy": sum(f["provider_busy"] for f in floods),
                        "answered_200": sum(f["statuses"].get("200", 0) for f in floods),
                        "slow_provider_asleep_at_once": max(
                            f["slow_provider_asleep_at_once"] for f in floods
                        ),
                    }
                    target.invoke_answers.update(quick_tally.statuses)
                    for f in floods:
                        target.invoke_answers.update({int(k): v for k, v in f["statuses"].items()})
                result["ledger"] = ledger_check(runtime, env, target)
        finally:
            runtime.db.dispose()
    return result


def _public(summary: dict[str, Any]) -> dict[str, Any]:
    """A merged side's summary without its private keys, with the CPU seconds serve spent over
    its windows (warm-ups included; both sides span the same wall time): beside the flood, the
    quick load's and the flood's together."""
    shown = {k: v for k, v in summary.items() if not k.startswith("_")}
    per, answered = shown.get("cpu_ms_per_request"), shown.get("answered", 0)
    shown["serve_cpu_seconds"] = None if per is None else round(per * answered / 1000, 2)
    return shown


def run(options: Options) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "started_at": started.isoformat(),
        "what": "a flood of slow calls to one provider beside a steady load on another, through "
        "one `mercato serve --workers 1` (issue 39)",
        "options": {
            "stores": list(options.stores),
            "flood": options.flood,
            "flood_sleep": options.flood_sleep,
            "clients": options.clients,
            "window": options.window,
            "rounds": options.rounds,
            "limit_expected": options.limit,
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "stores": {},
    }
    for store in options.stores:
        workdir = Path(tempfile.mkdtemp(prefix=f"mercato-neighbour-{store}-"))
        keep = False
        try:
            result["stores"][store] = data = run_store(store, options, workdir)
            keep = not ledger_ok(data.get("ledger", {}))
        finally:
            if keep:
                options.say(f"[{store}] ledger check failed: kept {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        options.say(f"[{store}] {line(result['stores'][store])}")
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    result["passed"] = all(passed(data) for data in result["stores"].values())
    options.out_dir.mkdir(parents=True, exist_ok=True)
    path = options.out_dir / f"neighbour-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    result["json_path"] = str(path)
    return result


def passed(data: dict[str, Any]) -> bool:
    """The quick load within the target, every quick call answered 200, the ledger right."""
    quick = data.get("quick_answers", {}).get("statuses", {})
    return (
        bool(data.get("verdict", {}).get("passed"))
        and set(quick) == {"200"}
        and ledger_ok(data.get("ledger", {}))
    )


def line(data: dict[str, Any]) -> str:
    alone, flooded, v, flood = data["alone"], data["flooded"], data["verdict"], data["flood"]
    return (
        f"quick provider alone {alone['rate']:.0f}/s p50 {alone['p50_ms']:.2f} ms; beside the "
        f"flood {flooded['rate']:.0f}/s p50 {flooded['p50_ms']:.2f} ms; ratios calls/s "
        f"{v['rate_ratio']} p50 {v['p50_ratio']} (within {v['within']:.0%}: {v['passed']}); "
        f"flood: {flood['provider_busy']} refused PROVIDER_BUSY, {flood['answered_200']} "
        f"answered 200, at most {flood['slow_provider_asleep_at_once']} asleep at once; "
        f"quick answers {data['quick_answers']['statuses']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.neighbour", description=__doc__)
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--flood", type=int, default=150, help="slow callers at once")
    parser.add_argument("--flood-sleep", type=float, default=5.0, help="seconds per slow call")
    parser.add_argument("--clients", type=int, default=8, help="the quick provider's clients")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument("--rounds", type=int, default=3, help="alone/flooded window pairs")
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help="the slow connection's calls in flight per process (MERCATO_PROVIDER_MAX_IN_FLIGHT)",
    )
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON is written")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout")
    args = parser.parse_args(argv)
    stores = tuple(s.strip() for s in args.stores.split(",") if s.strip())
    unknown = set(stores) - {"sqlite", "postgresql"}
    if unknown or not stores:
        parser.error(f"--stores: unknown store(s): {', '.join(sorted(unknown)) or '(none)'}")
    for name in ("flood", "clients", "rounds", "limit"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be 1 or more")
    for name in ("flood_sleep", "window"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be more than 0")
    options = Options(
        stores=stores,
        flood=args.flood,
        flood_sleep=args.flood_sleep,
        clients=args.clients,
        window=args.window,
        rounds=args.rounds,
        limit=args.limit,
        pg_admin_url=args.pg_admin_url,
        out_dir=args.out,
    )
    result = run(options)
    if args.json:
        print(json.dumps(result))
    else:
        for store, data in result["stores"].items():
            print(f"{store}: {line(data)}")
        print(f"result: {result['json_path']}; passed={result['passed']}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
