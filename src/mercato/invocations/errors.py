"""Invocation errors (DESIGN.md §3). Codes are a contract: keep them exactly."""

from __future__ import annotations

from typing import Any

from mercato.core.errors import BadRequest, Conflict, MercatoError, NotFound, ValidationFailed


class IdempotencyKeyMissing(BadRequest):
    code = "IDEMPOTENCY_KEY_MISSING"
    title = "Idempotency-Key header required"


class IdempotencyKeyInvalid(BadRequest):
    code = "IDEMPOTENCY_KEY_INVALID"
    title = "Idempotency-Key header not valid"


class IdempotencyKeyReused(ValidationFailed):
    code = "IDEMPOTENCY_KEY_REUSED"
    title = "Idempotency-Key already used for a different request"


class IdempotencyKeyInUse(Conflict):
    code = "IDEMPOTENCY_KEY_IN_USE"
    title = "A request with this Idempotency-Key is still being processed"

    def __init__(self, message: str | None = None, *, retry_after: int, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.set_retry_after(retry_after)


class RequestTooLarge(MercatoError):
    code = "REQUEST_TOO_LARGE"
    status = 413
    title = "Request body too large"


class RequestSchemaViolation(ValidationFailed):
    code = "REQUEST_SCHEMA_VIOLATION"
    title = "The request body does not match the version's request schema"


class RequestTooComplex(ValidationFailed):
    code = "REQUEST_TOO_COMPLEX"
    title = "The request body cannot be judged against the request schema within the deadline"


class ProviderDefinedFailure(ValidationFailed):
    code = "PROVIDER_DEFINED_FAILURE"
    title = "The provider reported a defined failure"


class ProviderContractViolation(MercatoError):
    code = "PROVIDER_CONTRACT_VIOLATION"
    status = 502
    title = "The provider's answer broke the version's contract"


class ProviderUnavailable(MercatoError):
    code = "PROVIDER_UNAVAILABLE"
    status = 502
    title = "The provider did not accept the call"


class InvocationNotFound(NotFound):
    code = "INVOCATION_NOT_FOUND"
    title = "Invocation not found"


class InvalidCursor(BadRequest):
    code = "INVALID_CURSOR"
    title = "Invalid cursor"


class InvalidQuery(BadRequest):
    code = "INVALID_QUERY"
    title = "Invalid query parameter"


class InvocationNotPending(Conflict):
    code = "INVOCATION_NOT_PENDING"
    title = "The invocation is no longer pending"


class InvocationAlreadyResolved(Conflict):
    code = "INVOCATION_ALREADY_RESOLVED"
    title = "Staff already resolved this invocation"


class InvalidResolution(ValidationFailed):
    code = "INVALID_RESOLUTION"
    title = "The resolution is not valid"
