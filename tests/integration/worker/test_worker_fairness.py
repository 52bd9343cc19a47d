"""The worker's lanes are shared fairly between connections, and its steps keep within each
connection's bulkhead (issue 39 item 2, DESIGN §7, decision 0513): a hung provider with many
calls to reconcile never holds every slot, so another connection's calls settle meanwhile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import SERVICE, World, running_world
from builders.invocations import Act, ScriptedProvider, envelope, scripted_provider, unknown
from builders.platform_process import wait_for
from builders.worker_world import add_service, grant
from mercato.catalog import service as catalog
from mercato.db.runtime import Runtime
from mercato.invocations import flows
from mercato.invocations.models import Invocation
from mercato.invocations.schemas import State
from mercato.providers import service as providers
from mercato.worker import loops

HUNG = "acme.hung"
LANE = 4
ROOMY = {"default_quota_limit": 100_000, "provider_timeout_seconds": 30.0}


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, worker_concurrency=LANE, **ROOMY) as built:
        grant(built, 10_000)
        yield built


def _unknown_calls(world: World, provider: ScriptedProvider, service: str, count: int) -> list[str]:
    """`count` calls to `service` whose first answer was UNKNOWN_OUTCOME."""
    ids = []
    for i in range(count):
        provider.script(unknown())
        response = world.invoke({"n": i}, key=f"{service}-{i}", service=service)
        assert response.status_code == 202, response.text
        ids.append(str(response.json()["invocationId"]))
    return ids


def _calls(world: World, ids: list[str]) -> list[Invocation]:
    wanted = set(ids)
    return [call for call in world.invocations() if call.id in wanted]


def _settled(world: World, ids: list[str]) -> bool:
    return all(c.state == "SUCCEEDED" and c.settlement == "SETTLED" for c in _calls(world, ids))


def _hang(provider: ScriptedProvider, count: int, gate: threading.Event) -> list[Act]:
    """The next `count` reconciliations wait for `gate`, then answer SUCCEEDED."""
    stored = envelope("SUCCEEDED", result={"echo": {"n": 0}})
    acts = [Act(200, stored, gate=gate, arrived=threading.Event()) for _ in range(count)]
    provider.script_reconciliation(*acts)
    return acts


def _arrived(acts: list[Act]) -> int:
    return sum(1 for act in acts if act.arrived is not None and act.arrived.is_set())


def test_a_hung_provider_never_holds_every_slot_of_a_lane(world: World) -> None:
    with scripted_provider() as hung:
        add_service(world, hung, HUNG)
        stuck = _unknown_calls(world, hung, HUNG, 3 * LANE)
        world.clock.advance(1)  # the hung provider's calls are due first: claimed first
        fast = _unknown_calls(world, world.provider, SERVICE, 2 * LANE)
        gate = threading.Event()
        acts = _hang(hung, len(stuck), gate)
        world.clock.advance(3600)

        worked: list[int] = []
        pass_ = threading.Thread(
            target=lambda: worked.append(run_on_fresh_loop(loops.reconcile_once(world.runtime)))
        )
        pass_.start()
        try:
            assert acts[0].arrived is not None and acts[0].arrived.wait(30)
            # Inside the hold (the provider's and the client's 30 s): a lane whose slots the
            # hung provider all held would leave these unreconciled until it answers.
            wait_for(lambda: _settled(world, fast), what="the other calls to settle", timeout=20)
            assert not gate.is_set() and pass_.is_alive()
            held = _arrived(acts)
            assert 1 <= held < LANE  # the hung provider holds some slots, never all
            assert all(c.state == "RECONCILING" for c in _calls(world, stuck))
        finally:
            gate.set()
            pass_.join(60)
    assert worked and worked[0] >= len(fast) + held
    assert all(world.provider.reconciliations[world.provider_key(i)] == 1 for i in fast)
    assert world.ledger_balanced()


def _connection_of(world: World, service: str) -> str:
    with world.runtime.db.read() as session:
        version = catalog.get_invocable_version(session, service_code=service, version="v1")
        return version.connection_id


def _bound(world: World, service: str, max_in_flight: int) -> None:
    """Give `service`'s connection its own bulkhead bound."""
    with world.runtime.db.transaction() as session:
        version = catalog.get_invocable_version(session, service_code=service, version="v1")
        providers.set_max_in_flight(
            session,
            connection_id=version.connection_id,
            max_in_flight=max_in_flight,
            settings=world.runtime.settings,
            now=world.clock.now(),
        )


def test_worker_steps_keep_within_the_connection_bulkhead(world: World) -> None:
    with scripted_provider() as hung:
        add_service(world, hung, HUNG)
        _bound(world, HUNG, 1)
        stuck = _unknown_calls(world, hung, HUNG, LANE)
        world.clock.advance(1)
        fast = _unknown_calls(world, world.provider, SERVICE, LANE)
        gate = threading.Event()
        acts = _hang(hung, len(stuck), gate)
        world.clock.advance(3600)

        pass_ = threading.Thread(
            target=lambda: run_on_fresh_loop(loops.reconcile_once(world.runtime))
        )
        pass_.start()
        try:
            assert acts[0].arrived is not None and acts[0].arrived.wait(30)
            wait_for(lambda: _settled(world, fast), what="the other calls to settle", timeout=20)
            assert _arrived(acts) == 1  # its bound in this process: one call at a time
            put_back = [c for c in _calls(world, stuck) if c.last_reason == "provider_busy"]
            assert put_back, "a step beyond the bound was put back"
            for call in put_back:  # nothing counted, nothing sent
                assert (call.state, call.reconciliations) == ("RECONCILING", 0)
                assert hung.reconciliations[world.provider_key(call.id)] == 0
        finally:
            gate.set()
            pass_.join(60)
    assert world.runtime.slots.in_flight() == 0
    assert world.ledger_balanced()


def test_a_claim_that_skipped_a_connection_whose_steps_ended_meanwhile_claims_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving a loaded machine produces by chance, made to happen: a claim skips the
    fast connection (at its share of the lane) and its steps all end while that claim runs;
    the claim finds nothing else due. The pass must claim the fast connection's other rows
    at once, not wait for "a step to end" when the only step left is the hung provider's."""
    with scripted_provider() as hung:
        add_service(world, hung, HUNG)
        _bound(world, HUNG, 1)  # of its two calls, one hangs and the other is put back
        stuck = _unknown_calls(world, hung, HUNG, 2)
        world.clock.advance(1)
        fast = _unknown_calls(world, world.provider, SERVICE, LANE)
        gate = threading.Event()  # the hung provider answers once every fast call is worked
        _hang(hung, len(stuck), gate)
        world.clock.advance(3600)
        fast_connection = _connection_of(world, SERVICE)
        events: list[str] = []

        async def pass_() -> int:
            released = asyncio.Event()  # the fast steps start reconciling
            idle = asyncio.Event()  # no fast step in flight
            running = 0
            worked: list[str] = []

            async def step(runtime: Runtime, invocation_id: str, owner: str) -> None:
                nonlocal running
                if invocation_id not in fast:
                    await flows.reconcile(runtime, invocation_id, owner)
                    if hung.reconciliations[world.provider_key(invocation_id)]:
                        events.append("hung step ended")  # not the one put back
                    return
                running += 1
                idle.clear()
                await released.wait()
                await flows.reconcile(runtime, invocation_id, owner)
                worked.append(invocation_id)
                events.append(f"fast {len(worked)} worked")
                running -= 1
                if not running:
                    idle.set()
                if len(worked) == len(fast):
                    gate.set()

            claim = loops._claim_due

            async def claim_then(
                runtime: Runtime,
                kind: loops.Claiming,
                owner: str,
                limit: int,
                skip: frozenset[str],
            ) -> list[tuple[str, str | None, str]]:
                if fast_connection in skip and not released.is_set():
                    released.set()
                    await idle.wait()  # the skipped connection's steps end during this claim
                return await claim(runtime, kind, owner, limit, skip)

            monkeypatch.setattr(loops, "_claim_due", claim_then)
            kind = loops.Claiming("reconcile", (State.RECONCILING,), step)
            return await loops.drain(world.runtime, kind, LANE)

        try:
            worked = run_on_fresh_loop(pass_())
        finally:
            gate.set()
    # Every fast call was worked while the hung provider still held its step (without the
    # fix, the pass waited on that step alone until the provider gave up its hold).
    assert events.index(f"fast {len(fast)} worked") < events.index("hung step ended")
    assert worked == len(stuck) + len(fast)
    assert _settled(world, fast)
    assert world.ledger_balanced()
