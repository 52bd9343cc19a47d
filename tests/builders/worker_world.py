"""Builders for the worker's scale tests: a second provider beside a world's own, calls left for
the worker by a process that died, a provider that reports how many reconciliations it has in
flight at once, and a worker running on a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from builders.catalog import approve_connection, publish
from builders.invocation_world import CONTRACT, PRICE, World
from builders.invocations import CREDENTIAL, Act, ScriptedProvider
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.worker.runner import run_forever


def add_service(world: World, provider: ScriptedProvider, service_code: str) -> None:
    """Publish `service_code` (v1, the world's contract and price) on a connection of its own
    to `provider`, owned by the world's provider account."""
    runtime = world.runtime
    with runtime.db.transaction() as session:
        connection = providers.create_connection(
            session,
            owner_id=world.provider_id,
            name=service_code,
            base_url=provider.url,
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=world.clock.now(),
        )
        connection_id = connection.id
    approve_connection(runtime, connection_id)
    publish(
        runtime,
        connection_id,
        service_code=service_code,
        price=PRICE,
        contract=CONTRACT,
        provider_share_bps=7000,
    )


def grant(world: World, points: int) -> None:
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=world.caller_id, amount=points, now=world.clock.now())


def accept_unsent(world: World, count: int, *, lease_seconds: float = 30) -> list[str]:
    """`count` calls to the world's service accepted by a serve process that died before
    sending them; its lease runs out `lease_seconds` from now."""
    address = world.address()
    return [
        world.accept_without_sending(
            f"unsent-{i}", owner="dead-process", lease_seconds=lease_seconds, address=address
        )
        for i in range(count)
    ]


class WaveProvider(ScriptedProvider):
    """A scripted provider that holds each reconciliation until `width` of them are in flight
    at once (or `expected` have arrived in all), then lets those answer; `most` is the largest
    number it ever had in flight. A worker running fewer than `width` at once leaves each
    reconciliation held until `hold_seconds` pass; one running more shows as `most > width`."""

    def __init__(self, width: int, expected: int, hold_seconds: float = 20.0) -> None:
        super().__init__()
        self.width, self.expected, self.hold_seconds = width, expected, hold_seconds
        self.waves = threading.Condition()
        self.in_flight = self.arrived = self.released = self.most = 0

    def _reconcile(self, key: str) -> Act:
        with self.waves:
            self.arrived += 1
            self.in_flight += 1
            mine = self.arrived
            self.most = max(self.most, self.in_flight)
            if self.in_flight >= self.width or self.arrived >= self.expected:
                self.released = self.arrived
                self.waves.notify_all()
            self.waves.wait_for(lambda: self.released >= mine, timeout=self.hold_seconds)
            # Out of flight before the answer is written: the worker's next call can only
            # start after it has read this one's answer.
            self.in_flight -= 1
        return super()._reconcile(key)


@contextmanager
def worker_running(runtime: Runtime, *, idle_seconds: float = 0.05) -> Iterator[threading.Event]:
    """`run_forever(runtime)` on a thread of its own until the block ends (then stopped and
    joined: the steps in flight finish first); yields its stop event."""
    stop = threading.Event()
    failed: list[BaseException] = []

    def target() -> None:
        try:
            run_forever(runtime, idle_seconds=idle_seconds, stop=stop)
        except BaseException as exc:  # handed to the test below
            failed.append(exc)

    thread = threading.Thread(target=target, name="mercato-worker")
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(120)
    assert not thread.is_alive(), "the worker did not stop"
    if failed:
        raise failed[0]
