"""The durable ingestion queue: recording manifests, leasing, retry scheduling."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from builders.accounts import make_account
from builders.artifacts import entry, make_invocation
from mercato.artifacts import service
from mercato.artifacts.errors import ArtifactNotFound, ManifestInvalid
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime

PNG = b"png bytes"
CSV = b"a,b\n1,2\n"


@pytest.fixture
def clocked(runtime: Runtime) -> Runtime:
    return Runtime(settings=runtime.settings, db=runtime.db, clock=FakeClock())


def _call(runtime: Runtime, manifest: list[dict[str, object]]) -> str:
    account_id = make_account(runtime.db)
    return make_invocation(runtime, account_id=account_id, manifest=manifest)


def test_recorded_manifest_is_listed_in_order_and_pending(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG, "chart"), entry(CSV, "table", "text/csv")])
    with clocked.db.read() as session:
        listed = service.list_for_invocation(session, invocation_id=call)
        pending = service.pending_ingestions(session)
    assert [a.entry.to_json()["artifactId"] for a in listed] == ["chart", "table"]
    assert listed[1].entry.to_json() == entry(CSV, "table", "text/csv")
    assert not any(a.ingested for a in listed)
    assert {(a.invocation_id, a.entry.artifact_id) for a in pending} == {
        (call, "chart"),
        (call, "table"),
    }


def test_recording_the_same_manifest_again_changes_nothing(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    with clocked.db.transaction() as session:
        service.record_manifest(
            session, invocation_id=call, entries=[entry(PNG)], now=clocked.clock.now()
        )
    with clocked.db.read() as session:
        assert len(service.list_for_invocation(session, invocation_id=call)) == 1


def test_a_different_manifest_for_the_same_call_is_refused(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    with pytest.raises(ManifestInvalid), clocked.db.transaction() as session:
        service.record_manifest(
            session, invocation_id=call, entries=[entry(CSV)], now=clocked.clock.now()
        )


def test_an_invalid_manifest_records_nothing(clocked: Runtime) -> None:
    call = _call(clocked, [])
    bad = {**entry(PNG), "digest": "nope"}
    with pytest.raises(ManifestInvalid), clocked.db.transaction() as session:
        service.record_manifest(session, invocation_id=call, entries=[bad], now=clocked.clock.now())
    with clocked.db.read() as session:
        assert service.list_for_invocation(session, invocation_id=call) == []


def test_a_leased_entry_is_not_leased_again_until_the_lease_expires(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    with clocked.db.transaction() as session:
        first = service.lease_ingestions(
            session, now=clocked.clock.now(), limit=10, lease_seconds=60
        )
    with clocked.db.transaction() as session:
        second = service.lease_ingestions(session, now=clocked.clock.now(), limit=10)
    assert [(j.invocation_id, j.connection_id, j.attempts) for j in first] == [
        (call, "conn_none", 1)
    ]
    assert second == []
    clocked.clock.advance(61)  # type: ignore[attr-defined]
    with clocked.db.transaction() as session:
        third = service.lease_ingestions(session, now=clocked.clock.now(), limit=10)
    assert [j.attempts for j in third] == [2]


def test_concurrent_workers_never_lease_the_same_entry(clocked: Runtime) -> None:
    manifest = [entry(bytes([i]) * 10, f"a{i}") for i in range(12)]
    _call(clocked, manifest)
    barrier = threading.Barrier(4)
    leased: list[list[str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait(timeout=10)
            with clocked.db.transaction() as session:
                jobs = service.lease_ingestions(session, now=clocked.clock.now(), limit=5)
            leased.append([j.entry.artifact_id for j in jobs])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    claimed = [artifact for batch in leased for artifact in batch]
    assert len(claimed) == len(set(claimed)) == 12


def test_failure_schedules_a_later_attempt_with_growing_backoff(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    delays: list[dt.timedelta] = []
    for _ in range(3):
        now = clocked.clock.now()
        with clocked.db.transaction() as session:
            (_job,) = service.lease_ingestions(session, now=now, limit=1)
            due = service.record_failure(
                session,
                invocation_id=call,
                artifact_id="chart",
                error="status 404",
                now=now,
                rng=clocked.random,
            )
        assert due is not None
        delays.append(due - now)
        clocked.clock.advance((due - now).total_seconds())  # type: ignore[attr-defined]
    assert delays[0] < delays[1] < delays[2]
    assert delays[0] >= dt.timedelta(seconds=service.BACKOFF_BASE_SECONDS)
    with clocked.db.read() as session:
        (stored,) = service.list_for_invocation(session, invocation_id=call)
    assert (stored.attempts, stored.last_error, stored.ingested) == (3, "status 404", False)


def test_mark_ingested_completes_the_entry_once(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    now = clocked.clock.now()
    with clocked.db.transaction() as session:
        assert service.mark_ingested(session, invocation_id=call, artifact_id="chart", now=now)
        assert not service.mark_ingested(session, invocation_id=call, artifact_id="chart", now=now)
    with clocked.db.transaction() as session:
        assert service.lease_ingestions(session, now=now, limit=10) == []
        assert service.pending_ingestions(session) == []
        artifact = service.get_artifact(session, invocation_id=call, artifact_id="chart")
    assert artifact.ingested_at == now
    assert artifact.next_attempt_at is None


def test_mark_corrupted_requeues_every_entry_with_that_digest(clocked: Runtime) -> None:
    call_a = _call(clocked, [entry(PNG)])
    call_b = make_invocation(
        clocked, account_id=make_account(clocked.db, "b@example.com"), manifest=[entry(PNG, "x")]
    )
    now = clocked.clock.now()
    with clocked.db.transaction() as session:
        service.mark_ingested(session, invocation_id=call_a, artifact_id="chart", now=now)
        service.mark_ingested(session, invocation_id=call_b, artifact_id="x", now=now)
        assert service.mark_corrupted(session, digest=entry(PNG)["digest"], now=now) == 2
    with clocked.db.read() as session:
        assert len(service.pending_ingestions(session)) == 2


def test_unknown_artifact_is_not_found(clocked: Runtime) -> None:
    call = _call(clocked, [entry(PNG)])
    with pytest.raises(ArtifactNotFound), clocked.db.read() as session:
        service.get_artifact(session, invocation_id=call, artifact_id="other")
