"""The spec 2.6 view and the IETF RateLimit header fields of one window."""

from __future__ import annotations

import datetime as dt

from mercato.quotas.schemas import QuotaStatus

NOW = dt.datetime(2026, 3, 1, 12, 0, 15, 500000, tzinfo=dt.UTC)
RESET = dt.datetime(2026, 3, 1, 12, 1, tzinfo=dt.UTC)


def test_status_document_and_headers() -> None:
    status = QuotaStatus("standard", 60, 60, 12, RESET, NOW)
    assert status.to_json() == {
        "policy": "standard",
        "limit": 60,
        "windowSeconds": 60,
        "accepted": 12,
        "remaining": 48,
        "resetAt": "2026-03-01T12:01:00Z",
    }
    # 44.5 s remain: delay-seconds round up, so a client never comes back too early.
    assert status.headers() == {
        "RateLimit-Policy": '"standard";q=60;w=60',
        "RateLimit": '"standard";r=48;t=45',
    }


def test_exhausted_window_never_shows_negative_remaining() -> None:
    status = QuotaStatus("tight", 3, 10, 3, RESET, RESET)
    assert status.remaining == 0 and status.reset_seconds == 1
