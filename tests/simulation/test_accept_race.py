"""Regression found by the simulation (seed 5000, step 529 on PostgreSQL): a same-key twin that
spends the caller's last points must make the first request a replay of the twin's answer,
not a 402, because a replay comes before any points check (DESIGN.md §3)."""

from __future__ import annotations

import random
from pathlib import Path

import httpx

from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import FakeClock
from mercato.db import models
from mercato.invocations.failpoints import BEFORE_ACCEPT
from support.simulation.provider import Knobs
from support.simulation.trace import Recorder
from support.simulation.world import SERVICE, START, Crasher, build_world, logged_errors


def test_twin_spending_the_last_points_is_replayed_not_refused(db_url: str, tmp_path: Path) -> None:
    models.load_all()
    recorder, clock, errors = Recorder(), FakeClock(START), []
    failpoints = Crasher(recorder)
    twin: list[httpx.Response] = []

    async def scenario() -> tuple[httpx.Response, int]:
        world = build_world(
            db_url,
            tmp_path / "data",
            clock,
            recorder,
            random.Random(0),
            failpoints=failpoints,
            seed=0,
        )
        world.provider.knobs = Knobs(0, 0, 0, 0, 0, 0, 0, 0)  # every call succeeds at once
        caller = world.callers[3]  # 40 points; v1 costs 10

        async def post(key: str) -> httpx.Response:
            return await world.http.post(
                f"/v1/services/{SERVICE}/versions/v1:invoke",
                content=b'{"n": 1}',
                headers={"Authorization": f"Bearer {caller.api_key}", "Idempotency-Key": key},
            )

        async def racing() -> None:
            twin.append(await post("last"))

        async with world:
            for index in range(3):
                clock.advance(10)  # this caller may make 2 calls per 10 s
                assert (await post(f"spend-{index}")).status_code == 200
            clock.advance(10)
            # The twin is accepted after our replay check, just before our accept transaction
            # opens (not inside it: its locks would make the twin wait on us).
            failpoints.interleave[BEFORE_ACCEPT] = racing
            first = await post("last")
        return first, len(world.provider.exchanges)

    with logged_errors(errors.append):
        first, keys_sent = run_on_fresh_loop(scenario())

    assert len(twin) == 1, "the twin ran at the before-accept point"
    assert twin[0].status_code == 200
    assert (first.status_code, first.content) == (200, twin[0].content)
    assert keys_sent == 4  # three spends and one execution for "last"
    assert errors == []
