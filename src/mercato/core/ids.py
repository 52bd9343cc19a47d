"""Identifiers: time-ordered, URL-safe, prefixed by kind.

An `Ids` source makes them. Production uses `SystemIds` (wall-clock milliseconds and 80 random
bits); a test or the simulation builds its Runtime with a seeded one. Every unit of work of a
`Database` binds the Runtime's source for its duration (`bound`), so the services that name
rows inside a transaction call `new_id(prefix)` and get the Runtime's ids without threading a
parameter through every call; code outside a unit of work asks `runtime.ids` directly.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, rem = divmod(number, 36)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def format_id(prefix: str, millis: int, bits: int) -> str:
    """`<prefix>_<9 base-36 digits of millis><16 of 80 random bits>`: lexical order is time."""
    return f"{prefix}_{_base36(millis, 9)}{_base36(bits, 16)}"


class Ids(Protocol):
    def new(self, prefix: str) -> str: ...


class SystemIds:
    """Wall-clock milliseconds and 80 bits from the operating system's CSPRNG."""

    def new(self, prefix: str) -> str:
        return format_id(prefix, time.time_ns() // 1_000_000, secrets.randbits(80))


SYSTEM_IDS = SystemIds()
_current: ContextVar[Ids] = ContextVar("mercato_ids", default=SYSTEM_IDS)


@contextmanager
def bound(ids: Ids) -> Iterator[None]:
    """Make `new_id` draw from `ids` in this context (a thread, a task) until the block ends."""
    token = _current.set(ids)
    try:
        yield
    finally:
        _current.reset(token)


def new_id(prefix: str) -> str:
    """A new id from the source bound by the current unit of work (else the system's)."""
    return _current.get().new(prefix)
