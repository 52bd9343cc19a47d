"""Where a NUL hides in a JSON document, and how a refusal names it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mercato.web.edge import (
    head_refusal,
    invalid_text,
    json_pointer,
    nul_in_json,
    shown,
)


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"a": "x"}, None),
        ("\x00", ()),
        ({"a": {"b": ["ok", "n\x00"]}}, ("a", "b", 1)),
        ({"ok": 1, "k\x00": 2}, ("k\x00",)),
        ([{"a": "1"}, {"b": "\x00", "c": "\x00"}], (1, "b")),  # the first in document order
        ({"n": 1, "t": True, "z": None, "f": 1.5}, None),
    ],
)
def test_nul_in_json_finds_the_first_holder(document: Any, path: tuple[Any, ...] | None) -> None:
    assert nul_in_json(document) == path


def test_an_escaped_backslash_is_not_a_nul() -> None:
    document = orjson.loads(b'{"path": "C:\\\\u0000"}')
    assert document == {"path": "C:\\u0000"}
    assert nul_in_json(document) is None


def test_deep_documents_do_not_recurse() -> None:
    document: Any = "\x00"
    for _ in range(5000):
        document = [document]
    assert nul_in_json(document) == (0,) * 5000


def test_pointers_escape_as_rfc_6901_and_show_the_nul() -> None:
    assert json_pointer(("a/b", "m~n", 0, "k\x00")) == "/a~1b/m~0n/0/k\\u0000"
    assert json_pointer(()) == ""
    assert shown("x" * 500) == "x" * 200


_text = st.text(st.characters(exclude_categories=["Cs"]) | st.sampled_from("\x00\\u0"))
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_a_nul_is_found_exactly_when_the_encoding_holds_one(document: Any) -> None:
    encoded = orjson.dumps(document)
    found = nul_in_json(document) is not None
    assert found == (b"\\u0000" in encoded.replace(b"\\\\", b""))
    if found:  # the edge's byte scan lets no NUL through unparsed
        assert b"\\u0000" in encoded


# --- the body the edge read, handed to the directly served route (decision 0430) ----------


def _head_refusal_first_written(scope: dict[str, Any]) -> Any:
    """`head_refusal`'s header loop as first written (decision 0499 scans the joined headers
    first); the rest of the function is unchanged, so this stops where they differ."""
    authorizations = 0
    for name, value in scope["headers"]:
        if name == b"authorization":
            authorizations += 1
        if value.find(b"\x00") != -1 or name.find(b"\x00") != -1:
            return invalid_text(400, "header", shown(name.decode("latin-1")))
    return authorizations


def _answer(response: Any) -> Any:
    if response is None:
        return None
    return response.status_code, response.body, response.headers.raw


_header_bytes = st.binary(max_size=6) | st.sampled_from([b"authorization", b"a\x00", b"\x00"])


@given(st.lists(st.tuples(_header_bytes, _header_bytes), max_size=6))
def test_the_head_refusal_is_the_one_the_header_loop_gave(
    headers: list[tuple[bytes, bytes]],
) -> None:
    scope = {"type": "http", "headers": headers, "path": "/x", "query_string": b"", "method": "GET"}
    first = _head_refusal_first_written(scope)
    ours = head_refusal(scope)
    if isinstance(first, int):  # no NUL in any header: the authorization count decides
        if first > 1:
            assert ours is not None and ours.status_code == 400
            assert b"AMBIGUOUS_CREDENTIALS" in ours.body
        else:
            assert ours is None
    else:
        assert _answer(ours) == _answer(first)
