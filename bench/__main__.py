"""`python -m bench [--duration S] [--concurrency N] [--stores sqlite,postgresql] [--quick]
[--growth [--growth-invocations N]]`: start the lean reference provider, the SDK provider and
the platform on loopback, load them, check the ledger, print the table. Exits 1 when
`verify-ledger` is not balanced or an accepted call was not settled exactly once."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_PG_ADMIN,
    RESULTS,
    LedgerCheckFailed,
    Options,
    measurements,
    run,
    table,
)


@contextmanager
def progress_bar(options: Options) -> Iterator[Options]:
    """`options` drawing a progress bar on stderr (rich), one step per measurement, with the
    harness's lines printed above it; gone when the run ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    console = Console(file=sys.stderr)
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("starting", total=measurements(options))
        started = False

        def step(label: str) -> None:
            nonlocal started
            if started:
                bar.advance(task)
            started = True
            bar.update(task, description=label)

        yield replace(
            options, step=step, say=lambda line: console.print(line, markup=False, highlight=False)
        )
        bar.advance(task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent clients")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--workers", type=int, default=2, help="mercato serve --workers")
    parser.add_argument(
        "--quick", action="store_true", help="3 s per measurement, 16 clients, no chart"
    )
    parser.add_argument(
        "--growth",
        action="store_true",
        help="then preload 1,000,000 invocations and 10,000 listings and measure again",
    )
    parser.add_argument(
        "--growth-invocations", type=int, default=1_000_000, help="smaller for a smoke run"
    )
    parser.add_argument("--growth-listings", type=int, default=10_000)
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout")
    args = parser.parse_args(argv)
    stores = tuple(s.strip() for s in args.stores.split(",") if s.strip())
    unknown = set(stores) - {"sqlite", "postgresql"}
    if unknown:
        parser.error(f"unknown store(s): {', '.join(sorted(unknown))}")
    options = Options(
        duration=3.0 if args.quick else args.duration,
        concurrency=16 if args.quick else args.concurrency,
        stores=stores,
        workers=args.workers,
        growth=args.growth,
        growth_invocations=args.growth_invocations,
        growth_listings=args.growth_listings,
        pg_admin_url=args.pg_admin_url,
        out_dir=args.out,
        chart=not args.quick,
    )
    drawn: Any = progress_bar(options) if sys.stderr.isatty() and not args.json else None
    try:
        with drawn or nullcontext(options) as shown:
            result = run(shown)
    except LedgerCheckFailed as failed:
        result = failed.result
        print(json.dumps(result) if args.json else table(result))
        for failure in failed.failures:
            print(f"LEDGER CHECK FAILED: {failure}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        print(table(result))
        print(f"result: {result['json_path']}" + (f", chart: {result.get('chart_path')}"))
    print(
        "ledger check: verify-ledger balanced and every accepted call settled exactly once, "
        "on every store",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
