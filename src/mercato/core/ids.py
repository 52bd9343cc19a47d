"""Identifiers: time-ordered, URL-safe, prefixed by kind."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, rem = divmod(number, 36)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """Return `<prefix>_<time-ordered random id>`; lexical order follows creation time."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_base36(millis, 9)}{_base36(secrets.randbits(80), 16)}"
