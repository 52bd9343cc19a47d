"""Artifact manifest entries as the platform stores and shows them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ManifestEntry:
    """One validated manifest entry (spec 2.9, DESIGN §7)."""

    artifact_id: str
    digest: str
    media_type: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "artifactId": self.artifact_id,
            "digest": self.digest,
            "mediaType": self.media_type,
            "size": self.size,
        }


@dataclass(frozen=True)
class StoredArtifact:
    """A manifest entry of one invocation with its ingestion state."""

    invocation_id: str
    entry: ManifestEntry
    ingested_at: dt.datetime | None
    next_attempt_at: dt.datetime | None
    attempts: int
    last_error: str | None

    @property
    def ingested(self) -> bool:
        return self.ingested_at is not None


@dataclass(frozen=True)
class PendingIngestion:
    """A leased entry to pull: which invocation, which connection, what to expect."""

    invocation_id: str
    connection_id: str
    entry: ManifestEntry
    attempts: int
