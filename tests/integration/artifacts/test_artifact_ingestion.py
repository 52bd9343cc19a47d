"""Ingestion pulls manifest entries into the store, verifying size and digest, idempotently."""

from __future__ import annotations

import hashlib

from builders.artifacts import FakeFetcher, fake_target, settled_call
from mercato.artifacts import flows, service
from mercato.artifacts.models import ArtifactBlob
from mercato.artifacts.store import BlobStore, LocalBlobStore, open_blob_store
from mercato.db.runtime import Runtime

PNG = b"\x89PNG chart bytes" * 50
CSV = b"rank,title\n1,a\n"


def _state(runtime: Runtime, call: str) -> dict[str, tuple[bool, int, str | None]]:
    with runtime.db.read() as session:
        return {
            a.entry.artifact_id: (a.ingested, a.attempts, a.last_error)
            for a in service.list_for_invocation(session, invocation_id=call)
        }


def test_ingestion_pulls_each_entry_into_the_store(blob_runtime: Runtime, blobs: BlobStore) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG, "table": CSV}, connection_id="conn_a")
    fetcher = FakeFetcher()
    png, csv = fetcher.serve(PNG), fetcher.serve(CSV)

    handled = flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)

    assert handled == 2
    assert sorted(fetcher.fetches) == sorted([png, csv])
    assert fetcher.targets == ["target:conn_a", "target:conn_a"]
    assert blobs.read(png) == PNG and blobs.read(csv) == CSV
    assert _state(blob_runtime, call) == {"chart": (True, 1, None), "table": (True, 1, None)}
    assert flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target) == 0


def test_bytes_not_matching_the_digest_are_refused_and_retried_later(
    blob_runtime: Runtime, blobs: BlobStore
) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG})
    digest = hashlib.sha256(PNG).hexdigest()
    tampered = PNG[:-1] + b"X"  # same size, other content
    fetcher = FakeFetcher()
    fetcher.serve(tampered, as_digest=digest)

    assert flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target) == 1

    assert not blobs.exists(digest)
    assert not blobs.exists(hashlib.sha256(tampered).hexdigest())
    ingested, attempts, error = _state(blob_runtime, call)["chart"]
    assert (ingested, attempts) == (False, 1)
    assert error is not None and "digest mismatch" in error
    # Not due yet: nothing is fetched again until the backoff has passed.
    assert flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target) == 0
    assert len(fetcher.fetches) == 1

    fetcher.serve(PNG)
    blob_runtime.clock.advance(3600 * 2)  # type: ignore[attr-defined]
    assert flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target) == 1
    assert blobs.read(digest) == PNG
    assert _state(blob_runtime, call)["chart"] == (True, 2, None)


def test_a_wrong_size_is_refused(blob_runtime: Runtime, blobs: BlobStore) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG})
    digest = hashlib.sha256(PNG).hexdigest()
    fetcher = FakeFetcher()
    fetcher.serve(PNG + b"trailing", as_digest=digest)

    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)

    assert not blobs.exists(digest)
    error = _state(blob_runtime, call)["chart"][2]
    assert error is not None and "size mismatch" in error


def test_a_failing_provider_is_recorded_and_retried(blob_runtime: Runtime) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG})
    fetcher = FakeFetcher()  # serves nothing: every fetch fails

    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)

    ingested, attempts, error = _state(blob_runtime, call)["chart"]
    assert (ingested, attempts) == (False, 1)
    assert error is not None and "fetch failed" in error


def test_a_blob_already_in_the_store_is_not_fetched_again(
    blob_runtime: Runtime, blobs: BlobStore
) -> None:
    blobs.put(PNG)
    _, call = settled_call(blob_runtime, {"chart": PNG})
    fetcher = FakeFetcher()

    assert flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target) == 1

    assert fetcher.fetches == []
    assert _state(blob_runtime, call)["chart"] == (True, 1, None)


def test_a_corrupted_copy_in_the_store_is_fetched_and_replaced(blob_runtime: Runtime) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG})
    fetcher = FakeFetcher()
    digest = fetcher.serve(PNG)
    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)
    _corrupt(blob_runtime, digest)
    with blob_runtime.db.transaction() as session:
        service.mark_corrupted(session, digest=digest, now=blob_runtime.clock.now())

    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)

    assert fetcher.fetches == [digest, digest]
    assert _state(blob_runtime, call)["chart"][0] is True
    assert open_blob_store(blob_runtime).read(digest) == PNG


def test_an_unresolvable_connection_is_recorded_and_retried(blob_runtime: Runtime) -> None:
    _, call = settled_call(blob_runtime, {"chart": PNG})

    def no_target(_session: object, *, connection_id: str, settings: object) -> object:
        raise LookupError(connection_id)

    flows.ingest_once(blob_runtime, FakeFetcher(), resolve_target=no_target)

    error = _state(blob_runtime, call)["chart"][2]
    assert error == "connection unavailable: LookupError"


def test_synchronous_ingestion_reports_completion_for_one_call(blob_runtime: Runtime) -> None:
    _, mine = settled_call(blob_runtime, {"chart": PNG}, email="me@example.com")
    _, other = settled_call(blob_runtime, {"table": CSV}, email="other@example.com")
    fetcher = FakeFetcher()
    fetcher.serve(PNG)

    done = flows.ingest_invocation(
        blob_runtime, fetcher, invocation_id=mine, resolve_target=fake_target
    )

    assert done is True
    assert _state(blob_runtime, mine)["chart"][0] is True
    assert _state(blob_runtime, other)["table"] == (False, 0, None)
    assert (
        flows.ingest_invocation(
            blob_runtime, fetcher, invocation_id=other, resolve_target=fake_target
        )
        is False
    )


def _corrupt(runtime: Runtime, digest: str) -> None:
    store = open_blob_store(runtime)
    if isinstance(store, LocalBlobStore):
        store.path_for(digest).write_bytes(b"rotten")
        return
    with runtime.db.transaction() as session:
        session.get_one(ArtifactBlob, digest).data = b"rotten"
