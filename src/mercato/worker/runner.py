"""Run the worker loops until told to stop (`mercato worker`)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.worker.loops import LOOPS, STUCK_LOOPS, Loop, run_lane

log = logging.getLogger("mercato.worker")


def run_forever(
    runtime: Runtime,
    client: ProviderClient,
    *,
    idle_seconds: float = 0.25,
    stop: threading.Event | None = None,
) -> None:
    """Pass after pass of each lane, the stuck lane in a thread of its own (so a stuck call
    never delays another); wait `idle_seconds` only when a pass found nothing to do."""
    stop = stop or threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    log.info("worker started")
    stuck_lane = threading.Thread(
        target=_passes,
        args=(runtime, client, STUCK_LOOPS, idle_seconds, stop),
        name="mercato-stuck-lane",
        daemon=True,
    )
    stuck_lane.start()
    try:
        _passes(runtime, client, LOOPS, idle_seconds, stop)
    finally:
        stop.set()
        stuck_lane.join()
    log.info("worker stopped")


def _passes(
    runtime: Runtime,
    client: ProviderClient,
    lane: tuple[Loop, ...],
    idle_seconds: float,
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        try:
            done = run_lane(runtime, client, lane)
        except Exception:
            log.exception("worker pass failed")
            done = 0
        if done == 0:
            stop.wait(idle_seconds)
