"""Canonical JSON (RFC 8785) and SHA-256 digests.

`rfc8785` is the definition. It is written in Python, and every invoke canonicalises its body
for the request's fingerprint, so values whose RFC 8785 form is exactly what `orjson` writes
with sorted keys are written by `orjson` (decision 0375):

- null, booleans, strings (both escape exactly `"`, `\\` and the controls below U+0020, the
  same way) and integers within ±(2**53 - 1) (beyond it RFC 8785 refuses them);
- arrays and objects of those, nested at most `_FAST_DEPTH` levels, whose keys contain no
  character above U+FFFF (RFC 8785 orders keys by UTF-16 code units, `orjson` by code points:
  the two orders differ only between such a character and one in U+E000-U+FFFF).

Anything else (a float, a subclass, a deeper value, a key beyond the BMP, a value `orjson`
refuses) is written by `rfc8785`, which also raises what it raises for it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import rfc8785

_SAFE_INT = 2**53 - 1
_FAST_DEPTH = 64
_LAST_BMP = "\uffff"


def canonical_json(value: Any) -> bytes:
    """Serialise `value` as RFC 8785 canonical JSON bytes."""
    if _plain(value, _FAST_DEPTH):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # e.g. a lone surrogate: rfc8785 says what is wrong
            pass
    return bytes(rfc8785.dumps(value))


def _plain(value: Any, depth: int) -> bool:
    """Whether `orjson` writes `value` exactly as RFC 8785 does (see the module docstring)."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if depth == 0:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or max(key) <= _LAST_BMP):
                return False
            if not _plain(item, depth - 1):
                return False
        return True
    if kind is list:
        return all(_plain(item, depth - 1) for item in value)
    return False


def sha256_hex(data: bytes) -> str:
    """Return the lowercase hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """Return the SHA-256 hex digest of the canonical JSON of `value`."""
    return sha256_hex(canonical_json(value))
