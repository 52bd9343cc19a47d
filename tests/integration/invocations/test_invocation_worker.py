"""Worker loops: recovery of expired leases, reconciliation, redispatch, leasing."""

from __future__ import annotations

import threading

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World
from builders.invocations import retryable, unknown
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.schemas import State
from mercato.providers import service as providers
from mercato.worker import loops


def test_live_lease_is_left_alone_and_replay_is_409(world: World) -> None:
    world.accept_without_sending("crashed", owner="dead-process")
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 0
    response = world.invoke({"n": 1}, key="crashed")
    assert response.status_code == 409
    assert response.json()["code"] == "IDEMPOTENCY_KEY_IN_USE"
    assert 1 <= int(response.headers["Retry-After"]) <= 30


def test_crash_after_accept_reconciles_first_then_sends_once(world: World) -> None:
    invocation_id = world.accept_without_sending("crashed", owner="dead-process")
    key = world.provider_key(invocation_id)
    world.clock.advance(31)  # the dead process's lease expires
    # A replay now sees a pending call nobody is processing: 202, and nothing is resent.
    assert world.invoke({"n": 1}, key="crashed").status_code == 202
    assert world.provider.executions[key] == 0
    world.work()
    assert world.provider.reconciliations[key] == 1  # asked first: "never accepted"
    assert world.provider.executions[key] == 1
    assert world.get(f"/v1/invocations/{invocation_id}").json()["settlement"] == "SETTLED"
    assert world.balances() == (90, 0) and world.ledger_balanced()


def test_crash_after_send_settles_from_reconciliation_without_resending(world: World) -> None:
    invocation_id = world.accept_without_sending("crashed", owner="dead-process")
    key = world.provider_key(invocation_id)
    with world.runtime.db.read() as session:
        job = invocations.load_job(session, invocation_id=invocation_id)
    with world.runtime.db.read() as session:
        target = providers.get_dispatch_target(
            session, connection_id=job.connection_id, settings=world.runtime.settings
        )
    world.provider_client.execute(
        target,
        idempotency_key=key,
        payload_bytes=job.payload,
        response_max_bytes=10_000,
        timeout=5,
    )  # sent; the process died before reading the answer
    world.work()
    assert world.provider.executions[key] == 1 and world.provider.reconciliations[key] == 1
    assert world.get(f"/v1/invocations/{invocation_id}").json()["settlement"] == "SETTLED"


def test_worker_redispatch_is_bounded(world: World) -> None:
    # Unknown first; reconciliation proves non-acceptance; then 503 until the bound is spent.
    world.provider.script(unknown(accept=False), retryable(), retryable())
    response = world.invoke({"n": 1})
    assert response.status_code == 202
    key = world.provider_key(response.json()["invocationId"])
    world.work()
    receipt = world.get(response.headers["Location"]).json()
    assert world.provider.executions[key] == 1 + world.runtime.settings.redispatch_attempts
    assert (receipt["settlement"], receipt["errorCode"]) == ("RELEASED", "PROVIDER_UNAVAILABLE")
    assert world.balances() == (100, 0)


def test_a_call_is_never_resent_to_a_connection_that_lost_its_approval(world: World) -> None:
    world.provider.script(unknown(accept=False), retryable())
    response = world.invoke({"n": 1})
    assert response.status_code == 202
    invocation_id = response.json()["invocationId"]
    key = world.provider_key(invocation_id)
    with world.runtime.db.transaction() as session:
        job = invocations.load_job(session, invocation_id=invocation_id)
        providers.update_connection(  # any change is a new revision, not yet approved
            session,
            connection_id=job.connection_id,
            settings=world.runtime.settings,
            now=world.clock.now(),
            name="renamed",
        )
    world.work()
    assert world.provider.reconciliations[key] == 1  # asked: "never accepted"
    assert world.provider.executions[key] == 1  # the first send only; nothing went again
    receipt = world.get(response.headers["Location"]).json()
    assert (receipt["settlement"], receipt["errorCode"]) == ("RELEASED", "PROVIDER_UNAVAILABLE")
    assert world.balances() == (100, 0) and world.ledger_balanced()


def test_reconciliation_waits_for_its_backoff(world: World) -> None:
    world.provider.script(unknown())
    response = world.invoke({"n": 1})
    key = world.provider_key(response.json()["invocationId"])
    assert run_on_fresh_loop(loops.run_once(world.runtime)) == 0  # not yet due
    assert world.provider.reconciliations[key] == 0
    world.work()
    assert world.provider.reconciliations[key] == 1


def test_concurrent_workers_never_take_the_same_row(world: World) -> None:
    ids = []
    for i in range(6):
        world.provider.script(unknown())
        ids.append(world.invoke({"n": i}, key=f"k{i}").json()["invocationId"])
    world.clock.advance(3600)
    barrier = threading.Barrier(3)
    done: list[int] = []

    def work() -> None:
        barrier.wait()
        done.append(run_on_fresh_loop(loops.reconcile_once(world.runtime)))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(done) == 6
    assert all(world.provider.reconciliations[world.provider_key(i)] == 1 for i in ids)
    assert world.reservations("SETTLED") == 6 and world.ledger_balanced()


def test_claim_skips_rows_leased_by_another(world: World) -> None:
    world.provider.script(unknown())
    world.invoke({"n": 1})
    world.clock.advance(3600)
    with world.runtime.db.transaction() as session:
        first = invocations.claim_due(
            session,
            states=(State.RECONCILING,),
            lease_owner="a",
            lease_seconds=30,
            now=world.clock.now(),
            limit=5,
        )
    with world.runtime.db.transaction() as session:
        second = invocations.claim_due(
            session,
            states=(State.RECONCILING,),
            lease_owner="b",
            lease_seconds=30,
            now=world.clock.now(),
            limit=5,
        )
    assert len(first) == 1 and second == []
    assert flows.lease_seconds(world.runtime) >= world.runtime.settings.provider_timeout_seconds
