"""Ingestion: pull manifest entries from providers into the platform's blob store.

Three steps per batch, like every flow that talks to a provider: lease rows (short
transaction), fetch and verify outside any transaction, record the result (short transaction).
A download of an entry not yet ingested pulls it the same way at once (`downloadable`); the
worker's batches are the retry path (decision 0206).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import Any, Protocol

from sqlalchemy.orm import Session

from mercato.artifacts import service
from mercato.artifacts.errors import ArtifactCorrupted, ArtifactNotReady, BlobNotFound
from mercato.artifacts.schemas import PendingIngestion, StoredArtifact
from mercato.artifacts.store import BlobStore, open_blob_store, sha256_hex
from mercato.db.runtime import Runtime
from mercato.settings import Settings

log = logging.getLogger("mercato.artifacts")

BATCH_SIZE = 20
MAX_RETRY_AFTER_SECONDS = 300


class ArtifactFetcher(Protocol):
    """What ingestion needs of the provider client (mercato.dispatch.client.ProviderClient)."""

    def fetch_artifact(self, target: Any, digest: str, *, max_bytes: int) -> bytes: ...


class TargetResolver(Protocol):
    """Find where and how to reach a connection (providers.service.get_dispatch_target)."""

    def __call__(self, session: Session, *, connection_id: str, settings: Settings) -> Any: ...


class IngestionFailed(Exception):
    """One pull did not yield the manifest's bytes; the message is safe to store."""


def ingest_once(
    runtime: Runtime,
    client: ArtifactFetcher,
    *,
    resolve_target: TargetResolver,
    store: BlobStore | None = None,
    limit: int = BATCH_SIZE,
    invocation_id: str | None = None,
) -> int:
    """Lease due entries, pull and verify each, store it; return how many entries were handled.

    Idempotent: an entry whose blob the store already holds intact is not fetched again.
    A fetch that fails or yields bytes not matching the manifest stores nothing and is
    retried later with backoff; `last_error` says why.
    """
    store = store or open_blob_store(runtime)
    with runtime.db.transaction() as session:
        leased = service.lease_ingestions(
            session, now=runtime.clock.now(), limit=limit, invocation_id=invocation_id
        )
        jobs = [(job, _resolve(session, resolve_target, job, runtime.settings)) for job in leased]
    for job, target in jobs:
        try:
            if isinstance(target, IngestionFailed):
                raise target
            _pull(store, client, job, target)
        except IngestionFailed as exc:
            _record_failure(runtime, job, str(exc))
        except Exception as exc:
            log.warning("artifact ingestion failed", extra={"invocation": job.invocation_id})
            _record_failure(runtime, job, f"unexpected error: {type(exc).__name__}")
        else:
            with runtime.db.transaction() as session:
                service.mark_ingested(
                    session,
                    invocation_id=job.invocation_id,
                    artifact_id=job.entry.artifact_id,
                    now=runtime.clock.now(),
                )
    return len(jobs)


def ingest_invocation(
    runtime: Runtime,
    client: ArtifactFetcher,
    *,
    invocation_id: str,
    resolve_target: TargetResolver,
    store: BlobStore | None = None,
) -> bool:
    """Best effort, right after settlement: pull one call's due entries now.

    Never raises; returns True when every entry of the call is ingested. What is left
    stays queued for the worker.
    """
    try:
        ingest_once(
            runtime,
            client,
            resolve_target=resolve_target,
            store=store,
            limit=service.MAX_MANIFEST_ENTRIES,
            invocation_id=invocation_id,
        )
        with runtime.db.read() as session:
            return not service.pending_ingestions(session, invocation_id=invocation_id)
    except Exception:
        log.exception("synchronous artifact ingestion failed; the worker will retry")
        return False


def downloadable(
    runtime: Runtime,
    client: ArtifactFetcher,
    artifact: StoredArtifact,
    *,
    resolve_target: TargetResolver,
    store: BlobStore | None = None,
) -> bytes:
    """Return a settled call's artifact, whole and verified against its manifest entry.

    An entry not yet ingested is pulled from the provider now (fetched, its size and digest
    checked, stored, marked ingested), so a call's artifacts are there as soon as its answer
    is. Raise ArtifactNotReady when that pull fails (nothing is stored; the worker retries) and
    ArtifactCorrupted when the stored copy no longer matches (it goes back to the queue).
    """
    store = store or open_blob_store(runtime)
    if artifact.ingested:
        try:
            return read_verified(store, artifact)
        except ArtifactCorrupted:
            with runtime.db.transaction() as session:
                service.mark_corrupted(
                    session, digest=artifact.entry.digest, now=runtime.clock.now()
                )
            raise
    try:
        return _pull_for_download(runtime, client, artifact, resolve_target, store)
    except IngestionFailed as exc:
        log.warning(
            "artifact pull on download failed: %s",
            exc,
            extra={"invocation": artifact.invocation_id},
        )
        raise ArtifactNotReady(
            "The platform could not fetch this artifact from the provider yet; it keeps trying.",
            retry_after=_retry_after(artifact.next_attempt_at, runtime.clock.now()),
        ) from None


def _pull_for_download(
    runtime: Runtime,
    client: ArtifactFetcher,
    artifact: StoredArtifact,
    resolve_target: TargetResolver,
    store: BlobStore,
) -> bytes:
    entry = artifact.entry
    data = _stored_copy(store, entry.digest)
    if data is None:
        with runtime.db.read() as session:
            connection_id = service.connection_of(session, invocation_id=artifact.invocation_id)
            job = PendingIngestion(
                invocation_id=artifact.invocation_id,
                connection_id=connection_id or "",
                entry=entry,
                attempts=artifact.attempts,
            )
            target = _resolve(session, resolve_target, job, runtime.settings)
        if isinstance(target, IngestionFailed):
            raise target
        data = _fetch_verified(client, job, target)
        store.put(data, media_type=entry.media_type)
    elif len(data) != entry.size:
        raise IngestionFailed(f"size mismatch: expected {entry.size} bytes, got {len(data)}")
    with runtime.db.transaction() as session:
        service.mark_ingested(
            session,
            invocation_id=artifact.invocation_id,
            artifact_id=entry.artifact_id,
            now=runtime.clock.now(),
        )
    return data


def _retry_after(due: dt.datetime | None, now: dt.datetime) -> int:
    wait = math.ceil(((due or now) - now).total_seconds())
    return min(MAX_RETRY_AFTER_SECONDS, max(1, wait))


def read_verified(store: BlobStore, artifact: StoredArtifact) -> bytes:
    """Read a whole stored artifact and check it against its manifest; raise ArtifactCorrupted."""
    try:
        data = store.read(artifact.entry.digest)
    except BlobNotFound:
        raise ArtifactCorrupted("The stored artifact is missing.") from None
    if len(data) != artifact.entry.size or sha256_hex(data) != artifact.entry.digest:
        raise ArtifactCorrupted("The stored artifact does not match its digest.")
    return data


def _resolve(
    session: Session, resolve_target: TargetResolver, job: PendingIngestion, settings: Settings
) -> Any:
    if not job.connection_id:
        return IngestionFailed("the call has no provider connection")
    try:
        return resolve_target(session, connection_id=job.connection_id, settings=settings)
    except Exception as exc:
        return IngestionFailed(f"connection unavailable: {type(exc).__name__}")


def _pull(store: BlobStore, client: ArtifactFetcher, job: PendingIngestion, target: Any) -> None:
    if _stored_copy(store, job.entry.digest) is not None:
        return
    store.put(_fetch_verified(client, job, target), media_type=job.entry.media_type)


def _fetch_verified(client: ArtifactFetcher, job: PendingIngestion, target: Any) -> bytes:
    """The provider's bytes for an entry, only once their size and digest match it."""
    entry = job.entry
    try:
        data = client.fetch_artifact(target, entry.digest, max_bytes=entry.size + 1)
    except Exception as exc:
        raise IngestionFailed(f"fetch failed: {_describe(exc)}") from None
    if len(data) != entry.size:
        raise IngestionFailed(f"size mismatch: expected {entry.size} bytes, got {len(data)}")
    actual = sha256_hex(data)
    if actual != entry.digest:
        raise IngestionFailed(f"digest mismatch: provider bytes hash to {actual}")
    return data


def _stored_copy(store: BlobStore, digest: str) -> bytes | None:
    """An existing blob counts only if it still hashes to its name (never trust a bad copy)."""
    if not store.exists(digest):
        return None
    try:
        data = store.read(digest)
    except BlobNotFound:
        return None
    return data if sha256_hex(data) == digest else None


def _describe(exc: Exception) -> str:
    # Client errors name the failure (timeout, status, too_large); nothing secret is in them,
    # but keep them short and drop anything multi-line.
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _record_failure(runtime: Runtime, job: PendingIngestion, error: str) -> None:
    with runtime.db.transaction() as session:
        service.record_failure(
            session,
            invocation_id=job.invocation_id,
            artifact_id=job.entry.artifact_id,
            error=error,
            now=runtime.clock.now(),
            rng=runtime.random,
        )
