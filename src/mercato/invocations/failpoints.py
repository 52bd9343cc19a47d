"""Test-only crash points: `MERCATO_FAILPOINTS=after-accept,after-send,before-settle`.

When a listed point is reached, the process SIGKILLs itself, so crash-recovery tests can stop
the platform at an exact step instead of by timing. Unset (the default), `hit` does nothing.
"""

from __future__ import annotations

import os
import signal

POINTS = ("after-accept", "after-send", "before-settle")
ENV_VAR = "MERCATO_FAILPOINTS"


def hit(point: str) -> None:
    """Kill this process at once if `point` is switched on."""
    configured = os.environ.get(ENV_VAR)
    if configured and point in {p.strip() for p in configured.split(",")}:
        os.kill(os.getpid(), signal.SIGKILL)
