"""Run the worker loops until told to stop (`mercato worker`)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.worker.loops import run_once

log = logging.getLogger("mercato.worker")


def run_forever(
    runtime: Runtime,
    client: ProviderClient,
    *,
    idle_seconds: float = 0.25,
    stop: threading.Event | None = None,
) -> None:
    """Pass after pass; wait `idle_seconds` only when a pass found nothing to do."""
    stop = stop or threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    log.info("worker started")
    while not stop.is_set():
        try:
            done = run_once(runtime, client)
        except Exception:
            log.exception("worker pass failed")
            done = 0
        if done == 0:
            stop.wait(idle_seconds)
    log.info("worker stopped")
