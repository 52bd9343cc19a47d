"""Accept and settle refuse as a whole: on PostgreSQL they are one statement each (decision
0191), on SQLite one transaction; a refusal leaves the invocation and the ledger as they were."""

from __future__ import annotations

import pytest

from builders.invocation_world import PRICE, SERVICE, World
from mercato.catalog import service as catalog
from mercato.invocations import service as invocations
from mercato.invocations.schemas import InvocationView
from mercato.ledger import service as ledger
from mercato.ledger.errors import ReservationAlreadyResolved
from mercato.quotas import service as quotas


def _accept(world: World, invocation_id: str, owner: str) -> None:
    runtime = world.runtime
    with runtime.db.read() as session:
        version = catalog.get_invocable_version(session, service_code=SERVICE, version="v1")
    with runtime.db.statement() as session:
        invocations.accept(
            session,
            invocation_id=invocation_id,
            account_id=world.caller_id,
            channel="API_KEY",
            idempotency_key=f"key-{invocation_id}",
            fingerprint="f" * 64,
            version=version,
            payload=b'{"n": 1}',
            policy=quotas.default_policy(runtime.settings),
            address=world.address(),
            lease_owner=owner,
            lease_seconds=60,
            now=world.clock.now(),
        )


def test_a_settle_that_finds_its_reservation_resolved_changes_nothing(world: World) -> None:
    _accept(world, "inv_guarded", "lease_guarded")
    assert world.balances() == (100 - PRICE, PRICE)
    now = world.clock.now()
    with world.runtime.db.transaction() as session:
        held = invocations.reservation_of(session, invocation_id="inv_guarded")
        ledger.release(session, reservation_id=held, now=now)  # resolved behind its back

    with pytest.raises(ReservationAlreadyResolved), world.runtime.db.statement() as session:
        invocations.finish_success(
            session,
            invocation_id="inv_guarded",
            lease_owner="lease_guarded",
            result=b'{"echo": {"n": 1}}',
            artifacts=None,
            now=now,
        )

    with world.runtime.db.read() as session:
        view = invocations.get_view(session, invocation_id="inv_guarded")
    assert (view.state, view.settlement) == ("DISPATCHING", "PENDING")  # taken back with it
    assert world.balances() == (100, 0) and world.earnings() == 0
    assert world.ledger_balanced()


def _settle(world: World, invocation_id: str, owner: str) -> InvocationView | None:
    with world.runtime.db.statement() as session:
        return invocations.finish_success(
            session,
            invocation_id=invocation_id,
            lease_owner=owner,
            result=b'{"echo": {"n": 1}}',
            artifacts=None,
            now=world.clock.now(),
        )


def test_a_settle_without_the_lease_changes_nothing(world: World) -> None:
    _accept(world, "inv_leased", "lease_holder")
    assert _settle(world, "inv_leased", "lease_other") is None
    assert world.balances() == (100 - PRICE, PRICE) and world.earnings() == 0
    settled = _settle(world, "inv_leased", "lease_holder")
    assert settled is not None and (settled.state, settled.settlement) == ("SUCCEEDED", "SETTLED")
    assert world.balances() == (100 - PRICE, 0) and world.earnings() == 7
    assert world.ledger_balanced()
