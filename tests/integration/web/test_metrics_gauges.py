"""`/metrics` gauges are computed from the database at scrape time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.invocation_world import PRICE, World, running_world
from builders.invocations import ScriptedProvider, ok, unknown


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider) as built:
        yield built


def _value(text: str, sample: str) -> float:
    match = re.search("^" + re.escape(sample) + r" (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{sample} not exposed"
    return float(match.group(1))


def test_backlog_age_and_reserved_points_follow_the_database(
    world: World, provider: ScriptedProvider
) -> None:
    provider.script(unknown(), unknown())
    first = world.invoke({"n": 1}, key="a")
    second = world.invoke({"n": 2}, key="b")
    assert (first.status_code, second.status_code) == (202, 202)
    world.clock.advance(90)

    text = world.client.get("/metrics").text
    assert _value(text, 'mercato_reconciliation_backlog{state="RECONCILING"}') == 2
    assert _value(text, 'mercato_reconciliation_backlog{state="RETRY_WAIT"}') == 0
    assert _value(text, "mercato_reserved_points_outstanding") == 2 * PRICE
    assert _value(text, "mercato_oldest_pending_invocation_age_seconds") >= 90

    provider.script_reconciliation(ok({"echo": 1}), ok({"echo": 2}))
    world.work()
    text = world.client.get("/metrics").text
    assert _value(text, 'mercato_reconciliation_backlog{state="RECONCILING"}') == 0
    assert _value(text, "mercato_reserved_points_outstanding") == 0
    assert _value(text, "mercato_oldest_pending_invocation_age_seconds") == 0
    assert "text/plain" in world.client.get("/metrics").headers["content-type"]
