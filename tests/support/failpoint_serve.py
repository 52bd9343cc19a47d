"""`mercato serve` whose Runtime carries failpoints that SIGKILL the process: the crash suite's
platform (test-only; the shipped `mercato serve` always runs with no failpoints).

    python tests/support/failpoint_serve.py --port P --failpoints after-accept[,after-send,...]

Settings come from the `MERCATO_*` environment exactly as for `mercato serve`; the only
difference is the failpoint set this entry puts in the Runtime it builds.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

import uvicorn

from mercato.cli.commands_core import server_options
from mercato.core.logs import configure_logging
from mercato.db.runtime import Runtime
from mercato.invocations.failpoints import CRASH_POINTS
from mercato.settings import load_settings
from mercato.web.app import create_app

SCRIPT = Path(__file__)


class KillAt:
    """Failpoints that SIGKILL this process when it reaches one of `points`."""

    def __init__(self, points: Iterable[str]) -> None:
        self.points = frozenset(points)

    def hit(self, point: str) -> None:
        if point in self.points:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--failpoints", required=True, help="comma-separated points")
    args = parser.parse_args(argv)
    points = [p.strip() for p in args.failpoints.split(",") if p.strip()]
    unknown = sorted(set(points) - set(CRASH_POINTS))
    if unknown:
        parser.error(f"--failpoints: unknown point(s) {', '.join(unknown)}")
    settings = load_settings()
    configure_logging()
    runtime = Runtime.from_settings(settings, failpoints=KillAt(points))
    uvicorn.run(create_app(runtime), **server_options(settings, host=args.host, port=args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
