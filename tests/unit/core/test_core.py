"""Core helpers: canonical JSON digests, ids, the fake clock."""

from __future__ import annotations

import hashlib

from mercato.core.canonical import canonical_json, digest_of
from mercato.core.clock import FakeClock
from mercato.core.ids import new_id


def test_canonical_json_is_rfc8785() -> None:
    assert canonical_json({"b": 1, "a": [True, None, 1.0]}) == b'{"a":[true,null,1],"b":1}'


def test_digest_is_sha256_of_canonical_form() -> None:
    value = {"type": "object", "additionalProperties": True}
    expected = hashlib.sha256(b'{"additionalProperties":true,"type":"object"}').hexdigest()
    assert digest_of(value) == expected
    assert digest_of({"additionalProperties": True, "type": "object"}) == expected


def test_ids_are_prefixed_unique_and_time_ordered() -> None:
    ids = [new_id("inv") for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(i.startswith("inv_") and len(i) <= 40 for i in ids)
    clock = FakeClock()
    start = clock.now()
    clock.advance(5)
    assert (clock.now() - start).total_seconds() == 5
