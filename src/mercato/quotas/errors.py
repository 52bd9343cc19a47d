"""Quota errors."""

from __future__ import annotations

from mercato.core.errors import BadRequest, RateLimited


class RateLimitExceeded(RateLimited):
    """429 with the spec 2.7 body; `retryAfter` equals the Retry-After header."""

    code = "RATE_LIMIT_EXCEEDED"
    title = "Rate limit exceeded"


class InvalidQuota(BadRequest):
    code = "INVALID_QUOTA"
    title = "Invalid quota policy"
