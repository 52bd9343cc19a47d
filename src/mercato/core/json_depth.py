"""How deeply a JSON text nests, found by a linear scan before any parser recurses into it.

Python's `json` recurses per level (a 100k-deep body raises RecursionError), orjson stops at
1024 levels, and canonicalisation, schema validation and fingerprinting recurse too. Payloads
are checked with `nesting_exceeds` first (docs/decisions/0181-json-nesting-limit.md).
"""

from __future__ import annotations

MAX_JSON_DEPTH = 64

_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_QUOTE = ord('"')
_ESCAPE = ord("\\")


def nesting_exceeds(text: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays/objects in `text` nest deeper than `limit` (strings are skipped)."""
    depth = 0
    in_string = False
    escaped = False
    for byte in text:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _ESCAPE:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif byte in _CLOSE:
            depth -= 1
    return False
