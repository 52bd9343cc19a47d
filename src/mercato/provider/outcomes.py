"""What a handler returns: a success (with an optional artifact manifest) or a defined failure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mercato.protocol import ERROR_CODE_MAX_LENGTH

if TYPE_CHECKING:
    from mercato.provider.blobs import BlobStore

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_ARTIFACT_ID = re.compile(r"^[\x21-\x2e\x30-\x7e]{1,128}$")  # one URL path segment


@dataclass(frozen=True, slots=True)
class Artifact:
    """One artifact manifest entry (DESIGN §7): the bytes live in the provider's blob store."""

    artifact_id: str
    digest: str
    media_type: str
    size: int

    def __post_init__(self) -> None:
        if not _ARTIFACT_ID.match(self.artifact_id) or self.artifact_id in {".", ".."}:
            raise ValueError("artifact_id must be 1-128 printable ASCII characters without '/'")
        if not _DIGEST.match(self.digest):
            raise ValueError("digest must be lowercase hex SHA-256")
        if not self.media_type:
            raise ValueError("media_type must be non-empty")
        if self.size < 0:
            raise ValueError("size must not be negative")

    @classmethod
    def put(
        cls, blobs: BlobStore, data: bytes, *, media_type: str, artifact_id: str | None = None
    ) -> Artifact:
        """Store `data` in `blobs` and return its manifest entry (id defaults to the digest)."""
        digest = blobs.put(data)
        return cls(artifact_id or digest, digest, media_type, len(data))

    def to_json(self) -> dict[str, Any]:
        """Return the wire form of the manifest entry."""
        return {
            "artifactId": self.artifact_id,
            "digest": self.digest,
            "mediaType": self.media_type,
            "size": self.size,
        }


@dataclass(frozen=True, slots=True)
class Success:
    """The business work is done; `result` is the JSON object the caller receives."""

    result: dict[str, Any]
    artifacts: list[Artifact] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.result, dict):
            raise TypeError("result must be a dict (a JSON object)")
        if self.artifacts and "artifacts" in self.result:
            raise ValueError("pass artifacts either in result or as artifacts=, not both")

    def result_json(self) -> dict[str, Any]:
        """Return the result with the artifact manifest merged in as `artifacts`."""
        if not self.artifacts:
            return dict(self.result)
        return {**self.result, "artifacts": [a.to_json() for a in self.artifacts]}


def _check_failure(error_code: str, http_status: int) -> None:
    if not isinstance(error_code, str) or not 1 <= len(error_code) <= ERROR_CODE_MAX_LENGTH:
        raise ValueError(f"error_code must be 1-{ERROR_CODE_MAX_LENGTH} characters")
    if isinstance(http_status, bool) or not isinstance(http_status, int):
        raise TypeError("http_status must be an int")
    if not 400 <= http_status < 600:
        raise ValueError("http_status must be 4xx or 5xx")


@dataclass(frozen=True, slots=True)
class DefinedFailure:
    """The request definitively failed and nothing was done: the caller is not charged.

    Never use it for infrastructure trouble after work may have happened; raise instead,
    and the SDK answers UNKNOWN_OUTCOME (spec 7, rule 4).
    """

    error_code: str
    http_status: int = 422

    def __post_init__(self) -> None:
        _check_failure(self.error_code, self.http_status)


class DefinedFailureError(Exception):
    """Raise from a handler to answer a DefinedFailure."""

    def __init__(self, error_code: str, http_status: int = 422) -> None:
        _check_failure(error_code, http_status)
        super().__init__(f"{error_code} ({http_status})")
        self.failure = DefinedFailure(error_code, http_status)
