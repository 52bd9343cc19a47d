"""Pure rules of the invoke path: key format, fingerprint, schema pointers, backoff."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mercato.core import schema_engine
from mercato.core.canonical import canonical_json, sha256_hex
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


@given(
    st.text(
        alphabet=st.one_of(
            st.characters(min_codepoint=0, max_codepoint=0x80),
            st.characters(),
        ),
        min_size=1,
        max_size=200,
    )
)
def test_key_check_is_its_definition(key: str) -> None:
    """1-191 characters, each visible ASCII ("!"..."~"), as the check was first written
    (decision 0496 checks it by `isascii`, `isprintable` and no space)."""
    valid = len(key) <= 191 and all("!" <= ch <= "~" for ch in key)
    if valid:
        assert check_idempotency_key([key]) == key
    else:
        with pytest.raises(IdempotencyKeyInvalid):
            check_idempotency_key([key])


@pytest.mark.parametrize("char", [chr(c) for c in range(0x100)])
def test_each_latin1_character_alone(char: str) -> None:
    if "!" <= char <= "~":
        assert check_idempotency_key(["k" + char]) == "k" + char
    else:
        with pytest.raises(IdempotencyKeyInvalid):
            check_idempotency_key(["k" + char])


def _fingerprint_as_written_first(service_code: str, version: str, body: bytes) -> str:
    """The fingerprint's definition: `canonical_json` of the whole document (decision 0472
    writes the outer document by orjson when that is the same)."""
    try:
        material = {"json": canonical_json(orjson.loads(body)).decode()}
    except Exception:
        material = {"raw": body.hex()}
    return sha256_hex(canonical_json({"serviceCode": service_code, "version": version, **material}))


class _Text(str):
    pass


_bodies = st.one_of(
    st.binary(max_size=40),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=6,
    ).map(lambda document: json.dumps(document).encode()),
)


@given(st.text(max_size=12), st.text(max_size=12), _bodies)
def test_the_fingerprint_is_the_canonical_json_of_its_document(
    service_code: str, version: str, body: bytes
) -> None:
    expected = _fingerprint_as_written_first(service_code, version, body)
    assert fingerprint_of(service_code=service_code, version=version, body=body) == expected
    assert fingerprint_of(service_code=_Text(service_code), version=version, body=body) == (
        expected
    )


def test_a_text_canonical_json_refuses_is_refused_as_before() -> None:
    with pytest.raises(Exception) as expected:
        _fingerprint_as_written_first("a\ud800", "v1", b"{}")
    with pytest.raises(type(expected.value)):
        fingerprint_of(service_code="a\ud800", version="v1", body=b"{}")


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
    errors = schema_engine.schema_errors(schema, {"a/b": "x", "list": ["ok", 3]})
    assert [e["pointer"] for e in errors] == ["/a~1b", "/list/1"]
    assert schema_engine.schema_errors(schema, {"a/b": 1}) == []


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_is_jittered_and_capped(attempt: int) -> None:
    delay = min(60.0, 0.5 * 2.0 ** (attempt - 1))
    for _ in range(20):
        value = flows._backoff(random.Random(attempt), 0.5, 60.0, attempt)
        assert delay / 2 <= value <= delay
