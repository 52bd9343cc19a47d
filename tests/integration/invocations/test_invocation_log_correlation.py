"""The invoke request's log line names its invocation, and every worker line about that
invocation carries the same invocation id and the same request id (decisions 0274, 0276), on
both stores."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World
from builders.invocations import unknown
from mercato.core.logs import json_handler
from mercato.dispatch.observed import ObservedProviderClient
from mercato.worker import loops


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = json_handler(stream)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(previous)


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_worker_lines_about_a_call_join_the_request_that_made_it(
    world: World, logs: io.StringIO
) -> None:
    world.provider.script(unknown(), unknown())
    pending = world.invoke({"n": 1}, key="key-1", headers={"X-Request-Id": "trace-7"})
    assert pending.status_code == 202
    other = world.invoke({"n": 2}, key="key-2", headers={"X-Request-Id": "trace-8"})
    assert other.status_code == 202
    invocation_id = pending.json()["invocationId"]

    # The request's own line: its request id and the invocation it created.
    requests = [line for line in _lines(logs) if line["msg"] == "request"]
    mine = [line for line in requests if line["request_id"] == "trace-7"]
    assert len(mine) == 1 and mine[0]["invocation_id"] == invocation_id

    # A worker pass, in its own context (no request of its own), reconciles both calls: each
    # line about a call carries the id of the request that made that call.
    logs.truncate(0)
    logs.seek(0)
    world.clock.advance(3600)
    with ObservedProviderClient(world.runtime.settings) as client:
        observed = dataclasses.replace(world.runtime, provider=client)
        assert run_on_fresh_loop(loops.reconcile_once(observed)) == 2
    worker = _lines(logs)
    calls = [line for line in worker if line["msg"] == "provider call"]
    assert len(calls) == 2 and all(line["operation"] == "reconcile" for line in calls)
    assert sorted((line["invocation_id"], line["request_id"]) for line in calls) == sorted(
        [(invocation_id, mine[0]["request_id"]), (other.json()["invocationId"], "trace-8")]
    )
    # Outside an invocation's step the worker's lines name neither call nor request.
    logging.getLogger("mercato.worker").info("idle")
    idle = _lines(logs)[-1]
    assert "invocation_id" not in idle and idle["request_id"] is None


def test_a_call_accepted_without_a_request_id_gets_the_generated_one(
    world: World, logs: io.StringIO
) -> None:
    world.provider.script(unknown())
    pending = world.invoke({"n": 1}, key="key-1")
    assert pending.status_code == 202
    generated = pending.headers["X-Request-Id"]
    world.clock.advance(3600)
    logs.truncate(0)
    logs.seek(0)
    with ObservedProviderClient(world.runtime.settings) as client:
        observed = dataclasses.replace(world.runtime, provider=client)
        assert run_on_fresh_loop(loops.reconcile_once(observed)) == 1
    calls = [line for line in _lines(logs) if line["msg"] == "provider call"]
    assert [line["request_id"] for line in calls] == [generated]
