"""`mercato worker`: the durable background loops (redispatch, reconciliation, artifacts)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mercato.cli.commands_core import runtime_from_env


def register(top: Any, _admin: Any) -> None:
    worker = top.add_parser("worker", help="run the background loops")
    worker.add_argument(
        "--once", action="store_true", help="run one pass, print the work done, and exit"
    )
    worker.add_argument("--idle-seconds", type=float, default=0.25)
    worker.set_defaults(handler=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    from mercato.core.logs import configure_logging
    from mercato.dispatch.observed import ObservedProviderClient
    from mercato.worker.loops import run_once
    from mercato.worker.runner import run_forever

    runtime = runtime_from_env(ObservedProviderClient)
    if not args.once:
        configure_logging()  # JSON lines on stderr, secrets redacted (docs/deployment.md)
    with runtime.provider_client():  # closed when the worker stops
        if args.once:
            print(asyncio.run(run_once(runtime)))
            return 0
        run_forever(runtime, idle_seconds=args.idle_seconds)
    return 0
