"""Pure rules of the invoke path: key format, fingerprint, schema pointers, backoff."""

from __future__ import annotations

import random

import pytest

from mercato.invocations import flows
from mercato.invocations.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from mercato.invocations.service import (
    check_idempotency_key,
    fingerprint_of,
    provider_key_for,
)


@pytest.mark.parametrize("key", ["a", "~" * 191, "order-123_ABC.x:y/z", '"quoted"'])
def test_valid_keys(key: str) -> None:
    assert check_idempotency_key([key]) == key


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ([], IdempotencyKeyMissing),
        ([""], IdempotencyKeyMissing),
        (["k" * 192], IdempotencyKeyInvalid),
        (["a b"], IdempotencyKeyInvalid),
        (["é"], IdempotencyKeyInvalid),
        (["a\x7f"], IdempotencyKeyInvalid),
        (["a", "b"], IdempotencyKeyInvalid),
    ],
)
def test_invalid_keys(values: list[str], error: type[Exception]) -> None:
    with pytest.raises(error):
        check_idempotency_key(values)


def test_fingerprint_is_canonical_and_covers_code_and_version() -> None:
    base = fingerprint_of(service_code="a.b", version="v1", body=b'{"x":1,"y":[1,2]}')
    assert base == fingerprint_of(service_code="a.b", version="v1", body=b'{ "y":[1,2], "x":1 }')
    assert base != fingerprint_of(service_code="a.b", version="v2", body=b'{"x":1,"y":[1,2]}')
    assert base != fingerprint_of(service_code="a.c", version="v1", body=b'{"x":1,"y":[1,2]}')
    assert base != fingerprint_of(service_code="a.b", version="v1", body=b'{"x":2,"y":[1,2]}')
    # Not JSON: the raw bytes decide, and never collide with a JSON body.
    assert fingerprint_of(service_code="a.b", version="v1", body=b"{x") != fingerprint_of(
        service_code="a.b", version="v1", body=b"{y"
    )


def test_provider_key_is_derived_from_the_invocation_only() -> None:
    assert provider_key_for("inv_abc") == "mercato:inv_abc"


def test_schema_errors_use_json_pointers() -> None:
    schema = {
        "type": "object",
        "properties": {"a/b": {"type": "integer"}, "list": {"items": {"type": "string"}}},
    }
    errors = flows.schema_errors(schema, {"a/b": "x", "list": ["ok", 3]})
    assert [e["pointer"] for e in errors] == ["/a~1b", "/list/1"]
    assert flows.schema_errors(schema, {"a/b": 1}) == []


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_is_jittered_and_capped(attempt: int) -> None:
    delay = min(60.0, 0.5 * 2.0 ** (attempt - 1))
    for _ in range(20):
        value = flows._backoff(random.Random(attempt), 0.5, 60.0, attempt)
        assert delay / 2 <= value <= delay
