"""Reconciliation asks the address that received the call, and only there (decision 0200)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from builders.catalog import approve_connection
from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World
from builders.invocations import ScriptedProvider, scripted_provider, unknown
from mercato.invocations import service as invocations
from mercato.providers import service as providers
from mercato.worker import loops


@pytest.fixture
def elsewhere() -> Iterator[ScriptedProvider]:
    """A second host the connection moves to while a call is unknown."""
    with scripted_provider() as provider:
        yield provider


def _move(world: World, invocation_id: str, **change: str) -> None:
    """Change the call's connection (a new revision) and approve the new revision."""
    with world.runtime.db.transaction() as session:
        connection_id = invocations.load_job(session, invocation_id=invocation_id).connection_id
        providers.update_connection(
            session,
            connection_id=connection_id,
            settings=world.runtime.settings,
            now=world.clock.now(),
            **change,
        )
    approve_connection(world.runtime, connection_id)


def test_a_moved_connection_is_never_sent_a_call_its_old_address_accepted(
    world: World, elsewhere: ScriptedProvider
) -> None:
    world.provider.script(unknown())  # the original host did the work; the answer was lost
    response = world.invoke({"n": 1})
    assert response.status_code == 202
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    _move(world, invocation_id, base_url=elsewhere.url)

    world.work()

    # Only the original host was asked; its stored outcome decided. The new host, which has
    # never heard of the key and would have said "never accepted", received nothing.
    assert world.provider.reconciliations[key] == 1
    assert (elsewhere.reconciliations[key], elsewhere.executions[key]) == (0, 0)
    assert world.provider.executions[key] == 1 and world.provider.business[key] == 1
    receipt = world.get(response.headers["Location"]).json()
    assert receipt["settlement"] == "SETTLED"
    assert world.balances() == (90, 0) and world.ledger_balanced()


def test_each_send_records_the_address_and_revision_that_received_it(
    world: World, elsewhere: ScriptedProvider
) -> None:
    world.provider.script(unknown(accept=False))  # the original host never accepted it
    response = world.invoke({"n": 1})
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    _move(world, invocation_id, base_url=elsewhere.url)

    world.work()

    # The original host proved it never accepted the key, so the call may go again, to the
    # connection as it stands now (approved), and that send is recorded as attempt 2.
    assert world.provider.reconciliations[key] == 1 and elsewhere.reconciliations[key] == 0
    assert (world.provider.executions[key], elsewhere.executions[key]) == (1, 1)
    with world.runtime.db.read() as session:
        progress = invocations.progress_of(session, invocation_id=invocation_id)
    sent = [(n, a.base_url, a.connection_revision) for n, a, _ in progress.attempts]
    assert sent == [(1, world.provider.url, 1), (2, elsewhere.url, 2)]
    assert world.get(response.headers["Location"]).json()["settlement"] == "SETTLED"


def test_a_new_credential_never_goes_to_the_old_address(
    world: World, elsewhere: ScriptedProvider
) -> None:
    world.provider.script(unknown())
    response = world.invoke({"n": 1})
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    _move(world, invocation_id, base_url=elsewhere.url, credential="rotated-credential-0123456789")

    world.clock.advance(3600)
    run_on_fresh_loop(loops.run_once(world.runtime))

    # The credential that reached the old address is gone; the new one must not follow it
    # there, and the new address cannot tell. The call stays unknown, its points reserved.
    assert world.provider.reconciliations[key] == 0
    assert (elsewhere.reconciliations[key], elsewhere.executions[key]) == (0, 0)
    receipt = world.get(response.headers["Location"]).json()
    assert (receipt["status"], receipt["settlement"]) == ("PENDING", "PENDING")
    assert world.balances() == (90, 10)
    with world.runtime.db.read() as session:
        progress = invocations.progress_of(session, invocation_id=invocation_id)
    assert progress.reconciliations == 1
    assert progress.last_reason == "original_address_credential_unknown"
