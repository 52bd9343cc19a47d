"""Test-only crash points: off unless MERCATO_PROVIDER_FAILPOINT names one. Never in production."""

from __future__ import annotations

import os
import signal

FAILPOINT_ENV = "MERCATO_PROVIDER_FAILPOINT"
AFTER_ACCEPT = "after-accept"


def hit(name: str) -> None:
    """SIGKILL this process when the fail-point environment variable equals `name`."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
