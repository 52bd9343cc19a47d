"""Which of the project's source files a warm invoke runs code in (issue 40): each file the
path passes through has one job, named here, and the count is pinned, so a new file on the
hot path, or the process's memory reached from anywhere but the flow, fails a test rather
than creeping in. Recorded by a profile hook (every Python function entered, in every
thread the app runs in) around the second invoke of an app that has answered one already."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import mercato.db
from builders.invocation_world import World

SRC = str(Path(mercato.db.__file__).resolve().parent.parent.parent) + "/"

FILES = 33
"""How many (the store's own executor among them)."""

PURPOSES = {
    "mercato/web/front.py": "the edge layer: request context, caps, checks, the invoke route",
    "mercato/web/observe.py": "the request id, log line and counters",
    "mercato/web/limits.py": "the body cap",
    "mercato/web/edge.py": "the edge checks (one Authorization header, no U+0000)",
    "mercato/web/direct.py": "the invoke route served directly",
    "mercato/web/api/invocations.py": "the invoke route: headers in, answer out",
    "mercato/invocations/flows.py": "the invoke flow: caller, reads, accept, send, conclude",
    "mercato/invocations/service.py": "the invocation's rules: key check, fingerprint, plans",
    "mercato/invocations/schemas.py": "the invocation view and its answers",
    "mercato/invocations/spend.py": "the API key's spend limit, as the accept program's inputs",
    "mercato/db/hints.py": "the process's memory of keys and facts, and its fallback",
    "mercato/accounts/service.py": "the bearer credential and the API key's digest",
    "mercato/quotas/service.py": "the quota slot's inputs and status",
    "mercato/quotas/schemas.py": "the RateLimit headers",
    "mercato/db/aio.py": "the units of work's common part",
    "mercato/db/aio_postgres.py": "the PostgreSQL executor",
    "mercato/db/aio_sqlite.py": "the SQLite executor",
    "mercato/db/aio_statements.py": "statements compiled for the async drivers",
    "mercato/db/plans.py": "the plan runner",
    "mercato/db/runner.py": "the money program runner (the guarded steps)",
    "mercato/db/base.py": "the column types",
    "mercato/dispatch/observed.py": "the provider call's metrics and log fields",
    "mercato/dispatch/calls.py": "the provider client (calls, headers, guard check, capped read)",
    "mercato/dispatch/async_client.py": "the async provider client's transport",
    "mercato/dispatch/outcomes.py": "the provider answer's classification",
    "mercato/protocol/envelope.py": "the provider envelope",
    "mercato/core/ids.py": "ids",
    "mercato/core/clock.py": "the clock",
    "mercato/core/logs.py": "log fields and secrets",
    "mercato/core/bulkhead.py": "the bulkhead",
    "mercato/core/canonical.py": "canonical JSON and digests",
    "mercato/core/json_depth.py": "the body's nesting bound",
    "mercato/core/schema_engine.py": "the schema judge",
    "mercato/core/schema_proof.py": "the schema judge's proof",
}


class Entries:
    """(file, the calling function's file) of every call of a function of the project from
    another file while `on`, in every thread: installed before the app's portal thread starts (by
    `threading.setprofile`), so that thread is profiled too."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[tuple[str, str]] = []
        self.frames: set[FrameType] = set()  # a coroutine resumed is not entered again

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and self.on and frame not in self.frames:
            self.frames.add(frame)
            name = frame.f_code.co_filename
            back = frame.f_back
            caller = "" if back is None else back.f_code.co_filename
            if name.startswith(SRC) and caller != name:  # entered from another file
                self.seen.append((name.removeprefix(SRC), caller.removeprefix(SRC)))

    @contextmanager
    def installed(self) -> Iterator[None]:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)


def _warm_invoke(world: World) -> list[tuple[str, str]]:
    """What the second invoke through one running app (one event loop, as a server's) enters."""
    entries = Entries()
    with entries.installed(), world.client as client:
        assert world.invoke(key="warm-up", client=client).status_code == 200
        entries.on = True
        answered = world.invoke(key="warm", client=client)
        entries.on = False
        entries.frames.clear()
    assert answered.status_code == 200, answered.text
    return entries.seen


def test_a_warm_invoke_runs_code_in_these_files_only(world: World) -> None:
    other = (
        "aio_postgres" if world.runtime.settings.database_url.startswith("sqlite") else "aio_sqlite"
    )
    expected = {name for name in PURPOSES if other not in name}
    files = {name for name, _caller in _warm_invoke(world)}
    assert files == expected
    assert len(files) == FILES


def test_only_the_flow_reaches_the_memory(world: World) -> None:
    callers = {caller for name, caller in _warm_invoke(world) if name == "mercato/db/hints.py"}
    assert callers == {"mercato/invocations/flows.py"}


def test_the_route_enters_the_flow_once(world: World) -> None:
    from_route = [
        name for name, caller in _warm_invoke(world) if caller == "mercato/web/api/invocations.py"
    ]
    assert from_route.count("mercato/invocations/flows.py") == 1
    assert "mercato/db/hints.py" not in from_route
