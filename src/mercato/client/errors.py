"""Typed exceptions of the Mercato client; a problem document's `code` picks the class.

No exception carries the API key: messages come from the server's problem documents (which
never echo credentials) or from fixed text here.
"""

from __future__ import annotations

from typing import Any


class MercatoClientError(Exception):
    """Base of everything the client raises; `code` is stable and upper-snake."""

    code: str = "CLIENT_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class MercatoAPIError(MercatoClientError):
    """The platform answered with an error: an RFC 9457 problem (or a bare HTTP error)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after
        self.idempotency_key = idempotency_key

    @property
    def invocation_id(self) -> str | None:
        value = self.problem.get("invocationId")
        return value if isinstance(value, str) else None

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The problem's located errors (`pointer`, `detail`), if it lists any."""
        found = self.problem.get("errors")
        return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []

    def error_lines(self) -> list[str]:
        """Each located error as `pointer: detail` (the document's root is `/`)."""
        return [f"{e.get('pointer') or '/'}: {e.get('detail', '')}" for e in self.errors]

    def __str__(self) -> str:
        located = self.error_lines()
        return super().__str__() + "".join(f"\n  {line}" for line in located)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status}, "
            f"message={self.message!r})"
        )


class BadRequest(MercatoAPIError):
    """400: the request itself is malformed (including a bad Idempotency-Key)."""


class Unauthenticated(MercatoAPIError):
    """401: no API key, or one that is unknown or revoked."""


class PaymentRequired(MercatoAPIError):
    """402: the call would spend points it may not spend; nothing was consumed."""


class InsufficientPoints(PaymentRequired):
    """402 INSUFFICIENT_POINTS: the account cannot cover the version's price."""


class KeySpendLimitReached(PaymentRequired):
    """402 KEY_SPEND_LIMIT_REACHED: the call's price would take the API key over its spend
    limit (`limit`, `used`; `resets_at` is None for a TOTAL limit)."""

    @property
    def limit(self) -> int | None:
        value = self.problem.get("limit")
        return value if isinstance(value, int) else None

    @property
    def used(self) -> int | None:
        value = self.problem.get("used")
        return value if isinstance(value, int) else None

    @property
    def resets_at(self) -> str | None:
        value = self.problem.get("resetsAt")
        return value if isinstance(value, str) else None


class Forbidden(MercatoAPIError):
    """403: the credential may not do this."""


class ListingUnavailable(Forbidden):
    """403 LISTING_UNAVAILABLE: the listing is held or unlisted."""


class NotFound(MercatoAPIError):
    """404: no such listing, version, invocation or artifact (or not yours)."""


class Conflict(MercatoAPIError):
    """409."""


class IdempotencyKeyInUse(Conflict):
    """409 IDEMPOTENCY_KEY_IN_USE: the first request with this key is still in flight."""


class InvocationNotSettled(Conflict):
    """409 INVOCATION_NOT_SETTLED: artifacts are served only for settled calls."""


class RequestTooLarge(MercatoAPIError):
    """413: the body is over the version's requestMaxBytes."""


class RangeNotSupported(MercatoAPIError):
    """416."""


class ValidationFailed(MercatoAPIError):
    """422."""


class RequestSchemaViolation(ValidationFailed):
    """422 REQUEST_SCHEMA_VIOLATION: `errors` lists JSON-pointer located violations."""


class IdempotencyKeyReused(ValidationFailed):
    """422 IDEMPOTENCY_KEY_REUSED: this key was used for a different request."""


class ProviderDefinedFailure(ValidationFailed):
    """422 PROVIDER_DEFINED_FAILURE: the provider's own stable errorCode; nothing was spent."""

    @property
    def error_code(self) -> str | None:
        value = self.problem.get("errorCode")
        return value if isinstance(value, str) else None

    @property
    def provider_http_status(self) -> int | None:
        value = self.problem.get("providerHttpStatus")
        return value if isinstance(value, int) else None


class RateLimitExceeded(MercatoAPIError):
    """429 RATE_LIMIT_EXCEEDED (spec 2.7): still limited after the client's bounded wait."""

    @property
    def policy(self) -> str | None:
        value = self.problem.get("policy")
        return value if isinstance(value, str) else None

    @property
    def limit(self) -> int | None:
        value = self.problem.get("limit")
        return value if isinstance(value, int) else None

    @property
    def window_seconds(self) -> int | None:
        value = self.problem.get("windowSeconds")
        return value if isinstance(value, int) else None


class ServerError(MercatoAPIError):
    """5xx."""


class ArtifactCorrupted(ServerError):
    """500 ARTIFACT_CORRUPTED: the platform's own copy failed its digest check."""


class ProviderContractViolation(ServerError):
    """502 PROVIDER_CONTRACT_VIOLATION: the provider broke the contract; nothing was spent."""


class ProviderUnavailable(ServerError):
    """502 PROVIDER_UNAVAILABLE: the provider never accepted the call; nothing was spent."""


class ServiceUnavailable(ServerError):
    """503."""


class ProviderNotApproved(ServiceUnavailable):
    """503 PROVIDER_NOT_APPROVED."""


class ProviderBusy(ServiceUnavailable):
    """503 PROVIDER_BUSY: the provider has as many calls in flight as it may take; nothing was
    consumed (the same Idempotency-Key may be sent again after `retry_after` seconds)."""


class ArtifactNotReady(ServiceUnavailable):
    """503 ARTIFACT_NOT_READY: still not fetched from the provider after the bounded wait."""


class TransportFailed(MercatoClientError):
    """The platform could not be reached (connect/read error, dropped connection, timeout)
    within the retry budget. For an invoke, `idempotency_key` resumes the same logical call."""

    code = "NETWORK_ERROR"

    def __init__(self, message: str, *, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key


class InvocationPending(MercatoClientError):
    """The call was accepted but had not settled when the client's wait budget ran out.
    Call `invoke` again with `idempotency_key` (or poll the receipt) to pick it up."""

    code = "INVOCATION_PENDING"

    def __init__(self, message: str, *, invocation_id: str, idempotency_key: str) -> None:
        super().__init__(message)
        self.invocation_id = invocation_id
        self.idempotency_key = idempotency_key


class ArtifactDigestMismatch(MercatoClientError):
    """The downloaded bytes do not hash to the manifest digest; nothing was kept."""

    code = "ARTIFACT_DIGEST_MISMATCH"

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class UnexpectedResponse(MercatoClientError):
    """A success answer whose body is not what the caller API documents."""

    code = "UNEXPECTED_RESPONSE"


_BY_CODE: dict[str, type[MercatoAPIError]] = {
    "UNAUTHENTICATED": Unauthenticated,
    "INSUFFICIENT_POINTS": InsufficientPoints,
    "KEY_SPEND_LIMIT_REACHED": KeySpendLimitReached,
    "LISTING_UNAVAILABLE": ListingUnavailable,
    "IDEMPOTENCY_KEY_IN_USE": IdempotencyKeyInUse,
    "INVOCATION_NOT_SETTLED": InvocationNotSettled,
    "REQUEST_TOO_LARGE": RequestTooLarge,
    "RANGE_NOT_SUPPORTED": RangeNotSupported,
    "REQUEST_SCHEMA_VIOLATION": RequestSchemaViolation,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "PROVIDER_DEFINED_FAILURE": ProviderDefinedFailure,
    "RATE_LIMIT_EXCEEDED": RateLimitExceeded,
    "ARTIFACT_CORRUPTED": ArtifactCorrupted,
    "PROVIDER_CONTRACT_VIOLATION": ProviderContractViolation,
    "PROVIDER_UNAVAILABLE": ProviderUnavailable,
    "PROVIDER_NOT_APPROVED": ProviderNotApproved,
    "PROVIDER_BUSY": ProviderBusy,
    "ARTIFACT_NOT_READY": ArtifactNotReady,
}

_BY_STATUS: dict[int, type[MercatoAPIError]] = {
    400: BadRequest,
    401: Unauthenticated,
    402: PaymentRequired,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: RequestTooLarge,
    416: RangeNotSupported,
    422: ValidationFailed,
    429: RateLimitExceeded,
    503: ServiceUnavailable,
}


def error_class(code: str, status: int) -> type[MercatoAPIError]:
    """The most specific class for a problem: by code, else by status."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else MercatoAPIError
