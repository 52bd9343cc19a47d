"""The engine takes its failpoints, sleep, jitter and ids from the Runtime it is given, and from
nowhere else: a test builds the Runtime with its own parts and sees them used (both stores)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from fastapi.testclient import TestClient

from builders.invocation_world import World
from builders.invocations import ok, retryable
from mercato.core.ids import format_id
from mercato.ledger.models import Reservation
from mercato.web.app import create_app


@dataclass
class Recording:
    """Failpoints that only note which points the engine reached, in order."""

    points: list[str] = field(default_factory=list)

    def hit(self, point: str) -> None:
        self.points.append(point)


@dataclass
class CountingIds:
    """Ids that say where they came from: `<prefix>_` then a counter in the time digits."""

    made: list[str] = field(default_factory=list)

    def new(self, prefix: str) -> str:
        made = format_id(prefix, len(self.made) + 1, 0)
        self.made.append(made)
        return made


def _rebuild(world: World, **parts: object) -> World:
    runtime = dataclasses.replace(world.runtime, **parts)
    client = TestClient(create_app(runtime), raise_server_exceptions=False)
    return dataclasses.replace(world, runtime=runtime, client=client)


def test_an_invoke_passes_the_engine_failpoints_in_order(world: World) -> None:
    recording = Recording()
    world = _rebuild(world, failpoints=recording)
    world.provider.script(ok())

    assert world.invoke({"n": 1}).status_code == 200
    assert recording.points == ["before-accept", "after-accept", "after-send", "before-settle"]


def test_the_inline_retry_sleeps_through_the_runtime_with_its_jitter(world: World) -> None:
    slept: list[float] = []

    async def asleep(seconds: float) -> None:
        slept.append(seconds)

    world = _rebuild(world, asleep=asleep, random=random.Random(7))
    world.provider.script(retryable(), ok())

    assert world.invoke({"n": 1}).status_code == 200
    # First inline redispatch: backoff 0.05 s, jittered into [0.025, 0.05] by the Runtime's random.
    assert slept == [0.025 + random.Random(7).random() * 0.025]


def test_ids_come_from_the_runtimes_source_inside_and_outside_a_unit_of_work(
    world: World,
) -> None:
    ids = CountingIds()
    world.runtime.db.ids = ids  # the Runtime's ids are its Database's
    world.provider.script(ok())

    assert world.invoke({"n": 1}).status_code == 200
    (invocation,) = world.invocations()
    with world.runtime.db.read() as session:
        reservation_ids = [r.id for r in session.query(Reservation)]
    assert invocation.id in ids.made  # named by the engine, outside a transaction
    assert reservation_ids and set(reservation_ids) <= set(ids.made)  # named inside one
    # A settled call is one pending transfer posted: the ledger makes no transfer of its own.
    assert not any(made.startswith("trf_") for made in ids.made)
