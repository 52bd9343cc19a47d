"""Run the worker loops until told to stop (`mercato worker`): one event loop, two lanes.

Each lane keeps its slots full: it claims as many due rows as it has free slots, and claims
again as soon as a step ends (not when a whole batch has), so one slow or dead provider holds
only the slots of its own calls (decision 0340). The stuck lane has slots of its own, so stuck
calls never delay fresh ones (decision 0201). Artifact ingestion and refund retries repeat on
threads beside them.

Stopping (SIGTERM, SIGINT, or the `stop` event): the lanes claim nothing more, the steps in
flight finish (each bounded by its own provider timeout), then `run_forever` returns.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from contextlib import suppress

from mercato.db.runtime import Runtime
from mercato.worker.loops import (
    FRESH_CLAIMING,
    STUCK_CLAIMING,
    Claiming,
    Loop,
    Slots,
    artifacts_once,
    folds_once,
    fresh_slots,
    refunds_once,
    stuck_slots,
    with_async_provider,
)

log = logging.getLogger("mercato.worker")


def run_forever(
    runtime: Runtime,
    *,
    idle_seconds: float = 0.25,
    stop: threading.Event | None = None,
) -> None:
    """Run both lanes and the thread loops on one event loop until `stop` is set (or a
    SIGTERM/SIGINT arrives, when called on the main thread); look for new work every
    `idle_seconds` while a lane has free slots and found nothing due."""
    stop = stop or threading.Event()
    try:
        asyncio.run(_serve(runtime, idle_seconds, stop))
    finally:
        stop.set()


async def _serve(runtime: Runtime, idle_seconds: float, stop: threading.Event) -> None:
    with_async_provider(runtime)
    loop = asyncio.get_running_loop()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    stopping = asyncio.Event()
    # `stop` is a threading.Event (set by a signal, or by a test from another thread): a
    # thread waits on it and wakes the loop.
    watcher = asyncio.ensure_future(asyncio.to_thread(stop.wait))
    watcher.add_done_callback(lambda _done: stopping.set())
    settings = runtime.settings
    log.info(
        "worker started (%d fresh and %d stuck steps at once)",
        fresh_slots(settings),
        stuck_slots(settings),
    )
    try:
        async with asyncio.TaskGroup() as group:
            fresh = _lane(runtime, FRESH_CLAIMING, fresh_slots(settings), idle_seconds, stopping)
            group.create_task(fresh, name="fresh-lane")
            stuck = _lane(runtime, STUCK_CLAIMING, stuck_slots(settings), idle_seconds, stopping)
            group.create_task(stuck, name="stuck-lane")
            for once in (artifacts_once, refunds_once, folds_once):
                group.create_task(_repeat(runtime, once, idle_seconds, stopping))
    finally:
        stop.set()
        await watcher
    log.info("worker stopped")


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


async def _lane(
    runtime: Runtime,
    kinds: tuple[Claiming, ...],
    size: int,
    idle_seconds: float,
    stopping: asyncio.Event,
) -> None:
    """Keep the lane's slots full until stopping; then let the steps in flight finish.

    Each round starts its claims with the next kind in turn, so a long backlog of one kind
    (reconciliations, say) never keeps another (redispatches) waiting for free slots."""
    slots = Slots(runtime, size)
    stopped = asyncio.ensure_future(stopping.wait())
    turn = 0
    try:
        while not stopping.is_set():
            order = kinds[turn:] + kinds[:turn]
            turn = (turn + 1) % len(kinds)
            drained = True
            try:
                for kind in order:
                    if not slots.free:
                        drained = False
                        break
                    _started, exhausted = await slots.fill(kind, slots.free)
                    drained = drained and exhausted
            except Exception:
                log.exception("worker claim failed")
                drained = True  # the database is unwell: try again after a while
            if stopping.is_set():
                break
            if drained:
                # Nothing more is due now: look again after a while (or when stopping).
                await _pause(stopping, idle_seconds)
            else:
                # Until a step ends, or a while: rows of a connection at its share of the lane
                # were skipped, and another connection's may fall due meanwhile (0513).
                await slots.wait_one(also=stopped, timeout=idle_seconds)
    finally:
        stopped.cancel()
        await slots.finish()


async def _repeat(
    runtime: Runtime, once: Loop, idle_seconds: float, stopping: asyncio.Event
) -> None:
    """Pass after pass of a thread loop; wait `idle_seconds` only when one found nothing."""
    while not stopping.is_set():
        try:
            done = await once(runtime)
        except Exception:
            log.exception("worker pass failed")
            done = 0
        if done == 0:
            await _pause(stopping, idle_seconds)
