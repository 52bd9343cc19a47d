"""Opaque keyset cursors: the last item's key in URL-safe base64 without padding.

A cursor says where the next page starts; the owning module checks that the decoded key is one
of its own (a case id, an invocation id, a service code) and raises its own `INVALID_CURSOR`.
"""

from __future__ import annotations

import base64
import binascii


def encode_cursor(key: str) -> str:
    """The cursor for a page that starts after `key`."""
    return base64.urlsafe_b64encode(key.encode()).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> str | None:
    """The key `cursor` carries, or None when it is not a cursor this API gave out."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
    except (binascii.Error, UnicodeError, ValueError):
        return None
