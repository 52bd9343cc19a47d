"""The clock seam: real time in production, a controllable one in tests."""

from __future__ import annotations

import datetime as dt
from typing import Protocol


def utcnow() -> dt.datetime:
    """Return the current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


class SystemClock:
    def now(self) -> dt.datetime:
        return utcnow()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)


def as_utc(value: dt.datetime) -> dt.datetime:
    """Attach UTC to a naive datetime read back from SQLite."""
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
