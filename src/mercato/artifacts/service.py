"""Artifact manifests of settled calls and the durable queue that pulls their bytes."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from random import Random
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from mercato.artifacts.errors import ArtifactNotFound, ManifestInvalid
from mercato.artifacts.models import InvocationArtifact
from mercato.artifacts.schemas import ManifestEntry, PendingIngestion, StoredArtifact
from mercato.artifacts.store import is_digest, record_blob
from mercato.db.plans import Plan, Rows, query
from mercato.protocol.manifest import MAX_ARTIFACT_BYTES as MAX_ARTIFACT_BYTES
from mercato.protocol.manifest import MAX_ARTIFACT_ID_CHARS as MAX_ARTIFACT_ID_CHARS
from mercato.protocol.manifest import MAX_MANIFEST_ENTRIES as MAX_MANIFEST_ENTRIES

LEASE_SECONDS = 120
BACKOFF_BASE_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 3600.0

_TOKEN = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_PARAM = rf'\s*;\s*{_TOKEN}=(?:{_TOKEN}|"[^"\\\x00-\x1f\x7f]*")'
_MEDIA_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}(?:{_PARAM})*")

# The invocations domain sits above this one (import-linter layers), so its row is read
# through a lightweight table clause naming only the two columns needed here.
_invocations = sa.table("invocations", sa.column("id"), sa.column("connection_id"))


def validate_manifest(entries: object) -> list[ManifestEntry]:
    """Check a provider's manifest (DESIGN §7) and return its entries; raise ManifestInvalid."""
    if not isinstance(entries, list):
        raise ManifestInvalid("The artifact manifest must be a list.")
    if len(entries) > MAX_MANIFEST_ENTRIES:
        raise ManifestInvalid(f"At most {MAX_MANIFEST_ENTRIES} artifacts per call.")
    parsed = [_parse_entry(index, raw) for index, raw in enumerate(entries)]
    ids = [entry.artifact_id for entry in parsed]
    if len(set(ids)) != len(ids):
        raise ManifestInvalid("artifactId values must be unique within one manifest.")
    return parsed


def _parse_entry(index: int, raw: object) -> ManifestEntry:
    where = f"artifacts[{index}]"
    if not isinstance(raw, dict):
        raise ManifestInvalid(f"{where} must be an object.")
    artifact_id = raw.get("artifactId")
    if not _valid_artifact_id(artifact_id):
        raise ManifestInvalid(
            f"{where}.artifactId must be 1-{MAX_ARTIFACT_ID_CHARS} printable characters "
            "without '/', and not '.' or '..'."
        )
    digest = raw.get("digest")
    if not is_digest(digest):
        raise ManifestInvalid(f"{where}.digest must be a lowercase hex SHA-256 (64 characters).")
    media_type = raw.get("mediaType")
    if not (
        isinstance(media_type, str) and len(media_type) <= 255 and _MEDIA_TYPE.fullmatch(media_type)
    ):
        raise ManifestInvalid(f"{where}.mediaType must be a media type such as image/png.")
    size = raw.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ManifestInvalid(f"{where}.size must be an integer >= 0.")
    if size > MAX_ARTIFACT_BYTES:
        raise ManifestInvalid(f"{where}.size exceeds the limit of {MAX_ARTIFACT_BYTES} bytes.")
    assert isinstance(artifact_id, str) and isinstance(digest, str)
    return ManifestEntry(artifact_id=artifact_id, digest=digest, media_type=media_type, size=size)


def _valid_artifact_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ARTIFACT_ID_CHARS
        and value.isprintable()
        and "/" not in value
        and value not in {".", ".."}
    )


_artifacts = InvocationArtifact.__table__.c
_MANIFEST_OF = (
    select(_artifacts.artifact_id, _artifacts.digest, _artifacts.media_type, _artifacts.size)
    .where(_artifacts.invocation_id == sa.bindparam("invocation_id"))
    .order_by(_artifacts.position)
)
_RECORD_ENTRY = cast(sa.Table, InvocationArtifact.__table__).insert()


@query
def record_manifest(
    *, invocation_id: str, entries: Sequence[Any], now: dt.datetime
) -> Plan[list[ManifestEntry]]:
    """Store a settled call's manifest, every entry pending ingestion; repeatable.

    Called inside the settle transaction. Recording the same manifest again is a no-op;
    a different one for the same invocation raises ManifestInvalid.
    """
    parsed = validate_manifest(list(entries))
    existing = [
        ManifestEntry(artifact_id=a, digest=d, media_type=m, size=int(n))
        for a, d, m, n in (yield Rows(_MANIFEST_OF, {"invocation_id": invocation_id}))
    ]
    if existing:
        if existing != parsed:
            raise ManifestInvalid("A different manifest is already recorded for this call.")
        return parsed
    if parsed:
        yield Rows(
            _RECORD_ENTRY,
            [
                {
                    "invocation_id": invocation_id,
                    "artifact_id": entry.artifact_id,
                    "position": position,
                    "digest": entry.digest,
                    "media_type": entry.media_type,
                    "size": entry.size,
                    "recorded_at": now,
                    "ingested_at": None,
                    "attempts": 0,
                    "next_attempt_at": now,
                    "last_error": None,
                }
                for position, entry in enumerate(parsed)
            ],
        )
    return parsed


def list_for_invocation(session: Session, *, invocation_id: str) -> list[StoredArtifact]:
    """Return the manifest of one invocation in manifest order (empty when it has none)."""
    rows = session.scalars(
        select(InvocationArtifact)
        .where(InvocationArtifact.invocation_id == invocation_id)
        .order_by(InvocationArtifact.position)
    ).all()
    return [_stored(row) for row in rows]


def get_artifact(session: Session, *, invocation_id: str, artifact_id: str) -> StoredArtifact:
    """Return one entry of an invocation's manifest; raise ArtifactNotFound."""
    row = session.get(InvocationArtifact, (invocation_id, artifact_id))
    if row is None:
        raise ArtifactNotFound("No such artifact for this call.")
    return _stored(row)


def connection_of(session: Session, *, invocation_id: str) -> str | None:
    """Return the provider connection an invocation was made through (None when unknown)."""
    found = session.execute(
        select(_invocations.c.connection_id).where(_invocations.c.id == invocation_id)
    ).scalar_one_or_none()
    return None if found is None else str(found)


def pending_ingestions(
    session: Session, *, invocation_id: str | None = None
) -> list[StoredArtifact]:
    """Return entries not yet ingested (all, or one invocation's), oldest due first."""
    query = select(InvocationArtifact).where(InvocationArtifact.ingested_at.is_(None))
    if invocation_id is not None:
        query = query.where(InvocationArtifact.invocation_id == invocation_id)
    rows = session.scalars(
        query.order_by(InvocationArtifact.next_attempt_at, InvocationArtifact.position)
    ).all()
    return [_stored(row) for row in rows]


def lease_ingestions(
    session: Session,
    *,
    now: dt.datetime,
    limit: int,
    lease_seconds: int = LEASE_SECONDS,
    invocation_id: str | None = None,
) -> list[PendingIngestion]:
    """Claim up to `limit` due entries for one worker until `now + lease_seconds`.

    PostgreSQL skips rows other workers hold locked; on every backend the claim is a
    conditional update on the row's due time, so two workers never claim one entry.
    An expired lease makes the entry due again, so a crashed worker loses nothing.
    """
    query = (
        select(
            InvocationArtifact.invocation_id,
            InvocationArtifact.artifact_id,
            InvocationArtifact.next_attempt_at,
        )
        .where(InvocationArtifact.ingested_at.is_(None), InvocationArtifact.next_attempt_at <= now)
        .order_by(InvocationArtifact.next_attempt_at, InvocationArtifact.position)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if invocation_id is not None:
        query = query.where(InvocationArtifact.invocation_id == invocation_id)
    lease_until = now + dt.timedelta(seconds=lease_seconds)
    claimed: list[tuple[str, str]] = []
    for inv_id, artifact_id, due in session.execute(query).all():
        result = session.execute(
            update(InvocationArtifact)
            .where(
                InvocationArtifact.invocation_id == inv_id,
                InvocationArtifact.artifact_id == artifact_id,
                InvocationArtifact.ingested_at.is_(None),
                InvocationArtifact.next_attempt_at == due,
            )
            .values(next_attempt_at=lease_until, attempts=InvocationArtifact.attempts + 1)
            .execution_options(synchronize_session=False)
        )
        if _rowcount(result) == 1:
            claimed.append((inv_id, artifact_id))
    return _pending(session, claimed)


def _pending(session: Session, keys: list[tuple[str, str]]) -> list[PendingIngestion]:
    if not keys:
        return []
    invocation_ids = sorted({inv_id for inv_id, _ in keys})
    connections = dict(
        session.execute(
            select(_invocations.c.id, _invocations.c.connection_id).where(
                _invocations.c.id.in_(invocation_ids)
            )
        )
        .tuples()
        .all()
    )
    leased: list[PendingIngestion] = []
    for inv_id, artifact_id in keys:
        row = session.get(InvocationArtifact, (inv_id, artifact_id), populate_existing=True)
        assert row is not None
        leased.append(
            PendingIngestion(
                invocation_id=inv_id,
                connection_id=str(connections.get(inv_id, "")),
                entry=_entry(row),
                attempts=row.attempts,
            )
        )
    return leased


def mark_ingested(
    session: Session, *, invocation_id: str, artifact_id: str, now: dt.datetime
) -> bool:
    """Record that the store holds an entry's verified bytes; False if it already did."""
    row = session.get(InvocationArtifact, (invocation_id, artifact_id), with_for_update=True)
    if row is None:
        raise ArtifactNotFound("No such artifact for this call.")
    if row.ingested_at is not None:
        return False
    record_blob(session, digest=row.digest, size=row.size, media_type=row.media_type, now=now)
    row.ingested_at = now
    row.next_attempt_at = None
    row.last_error = None
    session.flush()
    return True


def record_failure(
    session: Session,
    *,
    invocation_id: str,
    artifact_id: str,
    error: str,
    now: dt.datetime,
    rng: Random,
) -> dt.datetime | None:
    """Note a failed pull and schedule the next one with capped exponential backoff (jitter
    from `rng`, the Runtime's random)."""
    row = session.get(InvocationArtifact, (invocation_id, artifact_id), with_for_update=True)
    if row is None or row.ingested_at is not None:
        return None
    row.last_error = error[:500]
    row.next_attempt_at = now + backoff(row.attempts, rng)
    session.flush()
    return row.next_attempt_at


def backoff(attempts: int, rng: Random) -> dt.timedelta:
    """Delay before the next pull after `attempts` tries: doubling, capped, with jitter."""
    base = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, min(attempts - 1, 20)))
    return dt.timedelta(seconds=base * rng.uniform(1.0, 1.2))


def mark_corrupted(session: Session, *, digest: str, now: dt.datetime) -> int:
    """Put every entry with `digest` back in the queue after its stored bytes failed a check."""
    result = session.execute(
        update(InvocationArtifact)
        .where(InvocationArtifact.digest == digest, InvocationArtifact.ingested_at.is_not(None))
        .values(
            ingested_at=None,
            next_attempt_at=now,
            last_error="stored bytes failed verification; pulling again",
        )
        .execution_options(synchronize_session=False)
    )
    return _rowcount(result)


def _rowcount(result: object) -> int:
    count = getattr(result, "rowcount", 0)
    return int(count) if isinstance(count, int) else 0


def _entry(row: InvocationArtifact) -> ManifestEntry:
    return ManifestEntry(
        artifact_id=row.artifact_id, digest=row.digest, media_type=row.media_type, size=row.size
    )


def _stored(row: InvocationArtifact) -> StoredArtifact:
    return StoredArtifact(
        invocation_id=row.invocation_id,
        entry=_entry(row),
        ingested_at=row.ingested_at,
        next_attempt_at=row.next_attempt_at,
        attempts=row.attempts,
        last_error=row.last_error,
    )
