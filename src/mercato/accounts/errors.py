"""Errors of the accounts domain, each with a stable code."""

from __future__ import annotations

from mercato.core.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    MercatoError,
    NotFound,
    RateLimited,
    Unauthenticated,
)


class AccountNotFound(NotFound):
    code = "ACCOUNT_NOT_FOUND"
    title = "Account not found"


class AccountExists(Conflict):
    code = "ACCOUNT_EXISTS"
    title = "An account with this email already exists"


class InvalidEmail(BadRequest):
    code = "INVALID_EMAIL"
    title = "The email address is not valid"


class InvalidPassword(BadRequest):
    code = "INVALID_PASSWORD"
    title = "The password is not acceptable"


class InvalidApiKeyName(BadRequest):
    code = "INVALID_API_KEY_NAME"
    title = "The API key name is not valid"


class ApiKeyNotFound(NotFound):
    code = "API_KEY_NOT_FOUND"
    title = "API key not found"


class InvalidCredentials(Unauthenticated):
    code = "INVALID_CREDENTIALS"
    title = "Email or password is wrong"


class InvalidRefreshToken(Unauthenticated):
    code = "INVALID_REFRESH_TOKEN"
    title = "The refresh token is not valid"


class LoginThrottled(RateLimited):
    code = "LOGIN_THROTTLED"
    title = "Too many failed logins"


class SignupThrottled(RateLimited):
    code = "SIGNUP_THROTTLED"
    title = "Too many sign-ups from this address"


class SessionRequired(Forbidden):
    code = "SESSION_REQUIRED"
    title = "This needs a session, not an API key"


class StaffRequired(Forbidden):
    code = "STAFF_REQUIRED"
    title = "This needs a staff session"


class InvalidSpendLimit(BadRequest):
    code = "INVALID_SPEND_LIMIT"
    title = "A spend limit is whole points and a period"


class KeySpendLimitReached(MercatoError):
    """The call's price would take its API key over the key's spend limit (DESIGN §8):
    `limit`, `used` and `resetsAt` (null for TOTAL) in the problem document."""

    code = "KEY_SPEND_LIMIT_REACHED"
    status = 402
    title = "The API key's spend limit is reached"
