"""Errors of the providers domain, each with a stable code."""

from __future__ import annotations

from typing import Any

from mercato.core.errors import (
    Conflict,
    MercatoError,
    NotFound,
    ServiceUnavailable,
    ValidationFailed,
)


class ConnectionNotFound(NotFound):
    code = "PROVIDER_CONNECTION_NOT_FOUND"
    title = "Provider connection not found"


class InvalidConnection(ValidationFailed):
    code = "INVALID_PROVIDER_CONNECTION"
    title = "The provider connection is not valid"


class ProviderAddressForbidden(ValidationFailed):
    code = "PROVIDER_ADDRESS_FORBIDDEN"
    title = "The provider address is not a public address"


class ConnectionNameTaken(Conflict):
    code = "CONNECTION_NAME_TAKEN"
    title = "The owner already has a connection with this name"


class ConformanceNotPassed(Conflict):
    code = "CONFORMANCE_NOT_PASSED"
    title = "The latest conformance run on the current connection did not pass all nine checks"


class ProviderNotApproved(ServiceUnavailable):
    code = "PROVIDER_NOT_APPROVED"
    title = "The provider connection is not approved"


class CredentialUnreadable(MercatoError):
    code = "PROVIDER_CREDENTIAL_UNREADABLE"
    status = 500
    title = "The stored provider credential cannot be decrypted with the configured secret key"


class ProviderBusy(ServiceUnavailable):
    """The connection (or this process) has as many calls in flight as it may (DESIGN §7);
    refused before acceptance, nothing consumed. `Retry-After` and `retryAfter` in seconds."""

    code = "PROVIDER_BUSY"
    title = "The provider has as many calls in flight as it may take"

    def __init__(self, message: str | None = None, *, retry_after: int, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.set_retry_after(retry_after)
