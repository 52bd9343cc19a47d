"""The platform's own liveness and readiness endpoints (decision 0272).

`/health/live` is a coroutine: it is answered on the event loop, so a thread pool full of
requests waiting for the database or a provider never makes the process look dead.
`/health/ready` runs `SELECT 1` on a thread of its own (not the request pool, not a database
turn) and answers 503 when the database fails or does not answer within
`MERCATO_READY_TIMEOUT_SECONDS`. At most one check is in flight: while a check is stuck on a
database that never answers, the next probes answer 503 at once instead of piling up threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel
from sqlalchemy import text

from mercato.core.errors import ServiceUnavailable
from mercato.db.runtime import Runtime
from mercato.web.deps import runtime_of

router = APIRouter(tags=["health"])

_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"description": "The database failed or did not answer in time."}
}


class HealthStatus(BaseModel):
    status: Literal["ok"] = "ok"


@router.get("/health/live", response_model=HealthStatus)
async def live() -> HealthStatus:
    return HealthStatus()


class _ReadinessCheck:
    """One database check at a time, on its own daemon thread."""

    def __init__(self) -> None:
        self._busy = threading.Lock()

    async def run(self, runtime: Runtime, timeout: float) -> None:
        """Return when the database answered; raise ServiceUnavailable otherwise."""
        if not self._busy.acquire(blocking=False):
            raise ServiceUnavailable("The previous database check has not returned yet.")
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[BaseException | None] = loop.create_future()

        def report(outcome: BaseException | None) -> None:
            if not answered.done():
                answered.set_result(outcome)

        def check() -> None:
            outcome: BaseException | None = None
            try:
                # The engine directly: a readiness probe neither waits for nor holds one of
                # the database turns the requests share (decision 0185).
                with runtime.db.engine.connect() as connection:
                    connection.execute(text("SELECT 1"))
            except BaseException as exc:  # reported to the probe, never raised on the thread
                outcome = exc
            finally:
                self._busy.release()
            with contextlib.suppress(RuntimeError):  # the server stopped meanwhile
                loop.call_soon_threadsafe(report, outcome)

        threading.Thread(target=check, name="mercato-ready-check", daemon=True).start()
        try:
            outcome = await asyncio.wait_for(asyncio.shield(answered), timeout)
        except TimeoutError:
            raise ServiceUnavailable(f"The database did not answer within {timeout:g} s.") from None
        if outcome is not None:
            raise ServiceUnavailable("The database is not reachable.") from outcome


def _check_of(request: Request) -> _ReadinessCheck:
    state = request.app.state
    check: _ReadinessCheck | None = getattr(state, "readiness_check", None)
    if check is None:
        check = state.readiness_check = _ReadinessCheck()
    return check


@router.get("/health/ready", response_model=HealthStatus, responses=_UNAVAILABLE)
async def ready(request: Request) -> HealthStatus:
    runtime = runtime_of(request)
    await _check_of(request).run(runtime, runtime.settings.ready_timeout_seconds)
    return HealthStatus()
