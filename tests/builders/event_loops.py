"""Run a coroutine to completion from a sync test, whatever loop the test's thread carries.

Playwright's sync API (the browser tests' session fixture) leaves its event loop marked as
running in the thread of the xdist worker that ran it, so a later `asyncio.run` in that worker
refuses ("cannot be called from a running event loop"). A fresh thread has no loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_on_fresh_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coroutine)` on a thread of its own; its result, or its exception."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # handed back to the caller below
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="fresh-event-loop")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]
