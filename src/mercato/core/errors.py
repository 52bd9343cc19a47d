"""One error hierarchy with stable upper-snake codes; `web.problems` renders it once."""

from __future__ import annotations

from typing import Any, ClassVar


class MercatoError(Exception):
    """Base of every expected failure; `code` is stable and `status` is its HTTP status."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        self.message = message or self.title
        self.extra: dict[str, Any] = extra
        self.headers: dict[str, str] = {}
        super().__init__(self.message)

    def set_retry_after(self, seconds: int) -> None:
        """Ask the client to wait `seconds`: the `Retry-After` header and, as DESIGN §5 has every
        such answer carry, `retryAfter` in the body."""
        self.headers["Retry-After"] = str(seconds)
        self.extra.setdefault("retryAfter", seconds)


class BadRequest(MercatoError):
    code = "BAD_REQUEST"
    status = 400
    title = "Bad request"


class InvalidText(BadRequest):
    """U+0000 in a request's text, which no store can hold (refused at the web edge)."""

    code = "INVALID_TEXT"
    title = "The request holds text that cannot be stored"


class AmbiguousCredentials(BadRequest):
    """More than one Authorization header: the platform will not choose one."""

    code = "AMBIGUOUS_CREDENTIALS"
    title = "More than one credential was sent"


class ValidationFailed(MercatoError):
    code = "VALIDATION_FAILED"
    status = 422
    title = "The request is not valid"


class Unauthenticated(MercatoError):
    code = "UNAUTHENTICATED"
    status = 401
    title = "Authentication required"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.headers["WWW-Authenticate"] = 'Bearer realm="mercato"'


class Forbidden(MercatoError):
    code = "FORBIDDEN"
    status = 403
    title = "Not allowed"


class NotFound(MercatoError):
    code = "NOT_FOUND"
    status = 404
    title = "Not found"


class Conflict(MercatoError):
    code = "CONFLICT"
    status = 409
    title = "Conflict"


class RateLimited(MercatoError):
    code = "RATE_LIMITED"
    status = 429
    title = "Too many requests"

    def __init__(self, message: str | None = None, *, retry_after: int, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.set_retry_after(retry_after)


class ServiceUnavailable(MercatoError):
    code = "SERVICE_UNAVAILABLE"
    status = 503
    title = "Service unavailable"
