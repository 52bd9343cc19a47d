"""Keyset cursors: opaque, URL-safe, and they give back exactly the key they were made from."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mercato.core.cursors import decode_cursor, encode_cursor

_KEYS = st.text(alphabet=string.ascii_letters + string.digits + "._-:", min_size=1, max_size=64)


@given(_KEYS)
def test_a_cursor_gives_back_its_key_and_is_url_safe(key: str) -> None:
    cursor = encode_cursor(key)
    assert cursor != key
    assert set(cursor) <= set(string.ascii_letters + string.digits + "-_")
    assert decode_cursor(cursor) == key


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64!",  # outside the alphabet
        "a",  # a length no encoding produces
        "w4k",  # valid base64 of a non-ASCII key
        "é",  # not ASCII at all
    ],
)
def test_what_no_cursor_encodes_to_decodes_to_none(cursor: str) -> None:
    assert decode_cursor(cursor) is None
