"""Identifiers: time-ordered, URL-safe, prefixed by kind.

An `Ids` source makes them. Production uses `SystemIds` (wall-clock milliseconds and 80 random
bits); a test or the simulation builds its Runtime with a seeded one. Every unit of work of a
`Database` binds the Runtime's source for its duration (`bound`), so the services that name
rows inside a transaction call `new_id(prefix)` and get the Runtime's ids without threading a
parameter through every call; code outside a unit of work asks `runtime.ids` directly.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Protocol

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
"""Every two-digit base-36 string, by value (0-1295): two digits per lookup."""
_36_4 = 36**4
_36_8 = 36**8
_36_9 = 36**9
_36_16 = 36**16


def _base36(number: int, width: int) -> str:
    """The low `width` base-36 digits of `number` (zero-padded), one digit at a time."""
    out = []
    for _ in range(width):
        number, rem = divmod(number, 36)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def _base36_8(number: int) -> str:
    """`_base36(number, 8)` for 0 <= number < 36**8: four table lookups."""
    pairs = _PAIRS
    high, low = divmod(number, _36_4)
    a, b = divmod(high, 1296)
    c, d = divmod(low, 1296)
    return pairs[a] + pairs[b] + pairs[c] + pairs[d]


def _base36_9(number: int) -> str:
    """`_base36(number, 9)` for 0 <= number < 36**9."""
    first, rest = divmod(number, _36_8)
    return _ALPHABET[first] + _base36_8(rest)


def _base36_16(number: int) -> str:
    """`_base36(number, 16)` for 0 <= number < 36**16."""
    high, low = divmod(number, _36_8)
    return _base36_8(high) + _base36_8(low)


def format_id(prefix: str, millis: int, bits: int) -> str:
    """`<prefix>_<9 base-36 digits of millis><16 of 80 random bits>`: lexical order is time."""
    head = _base36_9(millis) if 0 <= millis < _36_9 else _base36(millis, 9)
    tail = _base36_16(bits) if 0 <= bits < _36_16 else _base36(bits, 16)
    return f"{prefix}_{head}{tail}"


class Ids(Protocol):
    def new(self, prefix: str) -> str: ...


_RANDOM_BYTES = 10  # 80 bits per id
_BATCH = 64  # ids' worth of random bytes read from the OS at once


def _tails(pool: bytes) -> list[str]:
    """The random digits of every id `pool` holds (`_base36_16` of each 80 bits, in order),
    formatted together when the pool is read: one loop, no call per id."""
    pairs = _PAIRS
    tails = []
    for at in range(0, len(pool), _RANDOM_BYTES):
        high, low = divmod(int.from_bytes(pool[at : at + _RANDOM_BYTES]), _36_8)
        h1, h2 = divmod(high, _36_4)
        l1, l2 = divmod(low, _36_4)
        a, b = divmod(h1, 1296)
        c, d = divmod(h2, 1296)
        e, f = divmod(l1, 1296)
        g, h = divmod(l2, 1296)
        tails.append(
            f"{pairs[a]}{pairs[b]}{pairs[c]}{pairs[d]}{pairs[e]}{pairs[f]}{pairs[g]}{pairs[h]}"
        )
    return tails


class _Source:
    """The random bytes and time digits of the system's ids, shared by every `SystemIds`.

    The bytes are read from `os.urandom` (what `secrets` reads) for 64 ids at a time and their
    digits formatted at once (`_tails`); each is handed out once by the list's iterator, whose
    step is one C call under the GIL, so threads sharing the source never get the same one
    (refilling takes a lock; a thread that finds the iterator spent draws a fresh batch). A
    forked child forgets the parent's unused bytes, so two processes never hand out the same
    ones. The time digits of the current millisecond are formatted once, kept with their
    millisecond in one tuple (read and replaced whole)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tails: Iterator[str] = iter(())
        self.stamp: tuple[int, str] = (-1, "")

    def draw(self, prefix: str) -> str:
        """`<prefix>_<the time digits of now><those of 80 fresh random bits>`."""
        try:
            tail = next(self.tails)
        except StopIteration:
            tail = self._refill()
        millis = time.time_ns() // 1_000_000
        stamp = self.stamp
        if stamp[0] != millis:
            head = _base36_9(millis) if 0 <= millis < _36_9 else _base36(millis, 9)
            stamp = self.stamp = (millis, head)
        return f"{prefix}_{stamp[1]}{tail}"

    def _refill(self) -> str:
        with self.lock:
            tails = iter(_tails(os.urandom(_RANDOM_BYTES * _BATCH)))
            tail = next(tails)
            self.tails = tails
            return tail


_SOURCE = _Source()


def _forget_after_fork() -> None:
    global _SOURCE
    _SOURCE = _Source()  # a fresh lock too: one held by another thread at fork stays held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class SystemIds:
    """Wall-clock milliseconds and 80 bits from the operating system's CSPRNG (`_Source`)."""

    def new(self, prefix: str) -> str:
        return _SOURCE.draw(prefix)


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


def bind(ids: Ids) -> Token[Ids]:
    """`bound` without a block, for a unit of work that is a class (end it with `unbind`)."""
    return _current.set(ids)


def unbind(token: Token[Ids]) -> None:
    """End what `bind` began."""
    _current.reset(token)


def new_id(prefix: str) -> str:
    """A new id from the source bound by the current unit of work (else the system's)."""
    return _current.get().new(prefix)
