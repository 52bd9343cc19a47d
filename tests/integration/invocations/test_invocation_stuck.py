"""Stuck calls: marked after N reconciliations or an age, kept in a lane of their own, seen by
operators, resolved by staff exactly once (decisions 0201, 0202)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World, running_world
from builders.invocations import Act, ScriptedProvider, envelope, unknown
from mercato.invocations import service as invocations
from mercato.invocations.errors import (
    InvalidResolution,
    InvocationAlreadyResolved,
    InvocationNotFound,
    InvocationNotPending,
)
from mercato.invocations.schemas import Decision, InvocationView
from mercato.ledger import service as ledger
from mercato.worker import loops


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, stuck_after_attempts=2) as built:
        yield built


def _unknown_call(world: World, key: str = "key-1") -> str:
    world.provider.script(unknown())
    response = world.invoke({"n": 1}, key=key)
    assert response.status_code == 202
    return str(response.json()["invocationId"])


def _reconcile_unknown(world: World, times: int, calls: int = 1) -> None:
    """`times` passes over `calls` calls in which the provider cannot tell yet."""
    for _ in range(times):
        world.provider.script_reconciliation(*[unknown() for _ in range(calls)])
        world.clock.advance(3600)
        run_on_fresh_loop(loops.run_once(world.runtime))


def _stuck_ids(world: World) -> list[str]:
    with world.runtime.db.read() as session:
        return [call.invocation_id for call in invocations.list_stuck(session)]


def _resolve(
    world: World, invocation_id: str, decision: Decision, reason: str = "checked"
) -> InvocationView:
    with world.runtime.db.transaction() as session:
        return invocations.resolve(
            session,
            invocation_id=invocation_id,
            decision=decision,
            reason=reason,
            actor="staff-1",
            now=world.clock.now(),
        )


def test_a_call_unknown_after_n_reconciliations_is_stuck_with_its_points_held(
    world: World,
) -> None:
    invocation_id = _unknown_call(world)
    _reconcile_unknown(world, 1)
    assert _stuck_ids(world) == []
    _reconcile_unknown(world, 1)

    assert _stuck_ids(world) == [invocation_id]
    assert world.balances() == (90, 10)
    metrics = world.client.get("/metrics").text
    assert "mercato_invocations_stuck 1.0" in metrics
    # It is still reconciled, at the slowest pace: not due for at least 150 s.
    key = world.provider_key(invocation_id)
    world.clock.advance(149)
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 0
    world.clock.advance(152)
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 1
    assert world.provider.reconciliations[key] == 3  # the stored outcome: it settles
    assert world.get(f"/v1/invocations/{invocation_id}").json()["settlement"] == "SETTLED"
    assert _stuck_ids(world) == []
    assert "mercato_invocations_stuck 0.0" in world.client.get("/metrics").text


def test_a_call_unknown_for_longer_than_the_age_bound_is_stuck(
    db_url: str, tmp_path: Path, provider: ScriptedProvider
) -> None:
    with running_world(db_url, tmp_path, provider, stuck_after_seconds=600) as world:
        invocation_id = _unknown_call(world)
        _reconcile_unknown(world, 1)  # an hour later: past the bound after one reconciliation
        assert _stuck_ids(world) == [invocation_id]


def test_a_pile_of_stuck_calls_never_delays_a_fresh_one(world: World) -> None:
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=world.caller_id, amount=1000, now=world.clock.now())
    pile = [_unknown_call(world, key=f"pile-{i}") for i in range(loops.BATCH + 5)]
    for _ in range(5):  # until every call of the pile is stuck; the provider cannot tell
        if len(_stuck_ids(world)) == len(pile):
            break
        _reconcile_unknown(world, 1, calls=len(pile))
    assert sorted(_stuck_ids(world)) == sorted(pile)
    with world.provider.lock:
        world.provider.recon_script.clear()
    asked = {i: world.provider.reconciliations[world.provider_key(i)] for i in pile}
    fresh = _unknown_call(world, key="fresh")
    world.clock.advance(3600)  # every stuck call and the fresh one are due together

    assert run_on_fresh_loop(loops.reconcile_once(world.runtime)) == 1

    assert world.provider.reconciliations[world.provider_key(fresh)] == 1
    assert world.get(f"/v1/invocations/{fresh}").json()["settlement"] == "SETTLED"
    assert {i: world.provider.reconciliations[world.provider_key(i)] for i in pile} == asked
    assert run_on_fresh_loop(loops.stuck_once(world.runtime)) == loops.BATCH


def test_staff_resolve_a_stuck_call_once_and_the_receipt_says_so(world: World) -> None:
    invocation_id = _unknown_call(world)
    _reconcile_unknown(world, 2)

    view = _resolve(world, invocation_id, Decision.FAILED, "provider confirmed it never ran")

    assert (view.state, view.settlement) == ("FAILED", "RELEASED")
    assert world.balances() == (100, 0) and world.ledger_balanced()
    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert receipt["status"] == "FAILED" and receipt["actualSpend"] == 0
    resolution = receipt["resolution"]
    assert (resolution["decision"], resolution["reason"]) == (
        "FAILED",
        "provider confirmed it never ran",
    )
    resolved_at = dt.datetime.fromisoformat(resolution["resolvedAt"].replace("Z", "+00:00"))
    assert resolved_at == world.clock.now()
    assert "staff-1" not in str(receipt)  # who decided never reaches the caller
    # Resolving again changes nothing, whatever the decision; nor does a late answer.
    with pytest.raises(InvocationAlreadyResolved):
        _resolve(world, invocation_id, Decision.SUCCEEDED)
    world.clock.advance(3600)
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 0
    assert world.balances() == (100, 0) and world.earnings() == 0
    assert _stuck_ids(world) == []


def test_resolve_succeeded_settles_through_the_ledger(world: World) -> None:
    invocation_id = _unknown_call(world)
    view = _resolve(world, invocation_id, Decision.SUCCEEDED)
    assert (view.state, view.settlement) == ("SUCCEEDED", "SETTLED")
    assert world.balances() == (90, 0) and world.earnings() == 7 and world.ledger_balanced()
    replay = world.invoke({"n": 1})
    assert replay.status_code == 200 and replay.json()["result"] is None


def test_resolve_refuses_what_it_cannot_resolve_and_changes_nothing(world: World) -> None:
    settled = world.invoke({"n": 1}, key="plain").json()["invocationId"]
    with pytest.raises(InvocationNotPending):
        _resolve(world, settled, Decision.FAILED)
    with pytest.raises(InvocationNotFound):
        _resolve(world, "inv_missing", Decision.FAILED)
    pending = _unknown_call(world)
    for reason in ("", "   ", "x" * 2001, "nul\x00"):
        with pytest.raises(InvalidResolution):
            _resolve(world, pending, Decision.FAILED, reason)
    assert world.balances() == (80, 10) and world.ledger_balanced()


def test_a_resolution_racing_a_late_answer_moves_the_points_once(world: World) -> None:
    invocation_id = _unknown_call(world)
    key = world.provider_key(invocation_id)
    gate, asked = threading.Event(), threading.Event()
    # The provider's late answer (the stored success) is held until staff have resolved.
    stored = envelope("SUCCEEDED", result={"echo": {"n": 1}})
    world.provider.script_reconciliation(Act(200, stored, gate=gate, arrived=asked))
    world.clock.advance(3600)
    worker = threading.Thread(target=lambda: run_on_fresh_loop(loops.run_once(world.runtime)))
    worker.start()
    assert asked.wait(30)
    view = _resolve(world, invocation_id, Decision.FAILED)
    gate.set()
    worker.join(60)

    assert world.provider.reconciliations[key] == 1
    assert (view.settlement, world.balances(), world.earnings()) == ("RELEASED", (100, 0), 0)
    assert world.reservations("HELD") == 0 and world.ledger_balanced()
    assert world.get(f"/v1/invocations/{invocation_id}").json()["settlement"] == "RELEASED"
