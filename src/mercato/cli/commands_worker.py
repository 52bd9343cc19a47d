"""`mercato worker`: the durable background loops (redispatch, reconciliation, artifacts)."""

from __future__ import annotations

import asyncio

import click

from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import command


def register(top: click.Group, _admin: click.Group) -> None:
    top.add_command(cmd_worker)


@command("worker", help="run the background loops")
@click.option("--once", is_flag=True, help="run one pass, print the work done, and exit")
@click.option("--idle-seconds", type=float, default=0.25, show_default=True)
def cmd_worker(once: bool, idle_seconds: float) -> int:
    from mercato.core.logs import configure_logging
    from mercato.dispatch.observed import ObservedProviderClient
    from mercato.worker.loops import run_once
    from mercato.worker.runner import run_forever

    runtime = runtime_from_env(ObservedProviderClient)
    if not once:
        configure_logging()  # JSON lines on stderr, secrets redacted (docs/deployment.md)
    with runtime.provider_client():  # closed when the worker stops
        if once:
            print(asyncio.run(run_once(runtime)))
            return 0
        run_forever(runtime, idle_seconds=idle_seconds)
    return 0
