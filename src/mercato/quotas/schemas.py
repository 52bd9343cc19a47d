"""Quota values passed between the service and the edges."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    limit: int
    window_seconds: int


@dataclass(slots=True)
class QuotaStatus:
    """The spec 2.6 view of one account's current window."""

    # Not frozen: one call's value, never shared (see `flows.InvokeRequest`).
    policy: str
    limit: int
    window_seconds: int
    accepted: int
    reset_at: dt.datetime
    now: dt.datetime

    @property
    def remaining(self) -> int:
        return max(self.limit - self.accepted, 0)

    @property
    def reset_seconds(self) -> int:
        """Whole seconds until the window resets (at least 1 while it has not)."""
        seconds = (self.reset_at - self.now).total_seconds()
        return max(int(-(-seconds // 1)), 1)

    def to_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "limit": self.limit,
            "windowSeconds": self.window_seconds,
            "accepted": min(self.accepted, self.limit),
            "remaining": self.remaining,
            "resetAt": self.reset_at.isoformat().replace("+00:00", "Z"),
        }

    def headers(self) -> dict[str, str]:
        """IETF draft-ietf-httpapi-ratelimit-headers `RateLimit-Policy` and `RateLimit`."""
        name = self.policy.replace("\\", "\\\\").replace('"', '\\"')
        return {
            "RateLimit-Policy": f'"{name}";q={self.limit};w={self.window_seconds}',
            "RateLimit": f'"{name}";r={self.remaining};t={self.reset_seconds}',
        }
