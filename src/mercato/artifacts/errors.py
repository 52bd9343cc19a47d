"""Artifact errors, each with a stable code."""

from __future__ import annotations

from typing import Any

from mercato.core.errors import BadRequest, Conflict, MercatoError, NotFound, ServiceUnavailable


class ManifestInvalid(BadRequest):
    """A provider's artifact manifest breaks the contract (the caller decides what that means)."""

    code = "ARTIFACT_MANIFEST_INVALID"
    title = "The artifact manifest is not valid"


class ArtifactNotFound(NotFound):
    code = "ARTIFACT_NOT_FOUND"
    title = "Artifact not found"


class RangeNotSupported(MercatoError):
    code = "RANGE_NOT_SUPPORTED"
    status = 416
    title = "Range requests are not supported"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        super().__init__(message or "Artifacts are served whole; remove the Range header.", **extra)
        self.headers["Accept-Ranges"] = "none"


class InvocationNotSettled(Conflict):
    code = "INVOCATION_NOT_SETTLED"
    title = "The call is not settled"


class ArtifactNotReady(ServiceUnavailable):
    """The call is settled but the platform has not yet pulled the bytes from the provider."""

    code = "ARTIFACT_NOT_READY"
    title = "The artifact is not available yet"

    def __init__(self, message: str | None = None, *, retry_after: int, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.set_retry_after(retry_after)


class ArtifactCorrupted(MercatoError):
    """The stored bytes no longer match the manifest digest; they are never served."""

    code = "ARTIFACT_CORRUPTED"
    status = 500
    title = "The stored artifact failed verification"


class BlobNotFound(MercatoError):
    """The blob store holds no object under this digest."""

    code = "BLOB_NOT_FOUND"
    status = 500
    title = "Blob missing from the store"
