"""Canonical JSON (RFC 8785) and SHA-256 digests."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """Serialise `value` as RFC 8785 canonical JSON bytes."""
    return bytes(rfc8785.dumps(value))


def sha256_hex(data: bytes) -> str:
    """Return the lowercase hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """Return the SHA-256 hex digest of the canonical JSON of `value`."""
    return sha256_hex(canonical_json(value))
