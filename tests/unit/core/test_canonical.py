"""Canonical JSON: whatever path writes it, the bytes are `rfc8785`'s (the definition)."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from mercato.core.canonical import canonical_json

_KEYS = st.one_of(
    st.text(max_size=6),
    # the characters where UTF-16 and code point order disagree, and the controls
    st.text(alphabet='\ue000\uffff\U00010000\U0010ffffa\x00\x1f"\\é', max_size=4),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)


def _nested(depth: int) -> Any:
    value: Any = {"n": 1}
    for _ in range(depth):
        value = [value]
    return value


def _definition(value: Any) -> bytes | type[Exception]:
    try:
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError as error:
        return type(error)


def _ours(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_json(value)
    except rfc8785.CanonicalizationError as error:
        return type(error)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_any_value_is_written_as_rfc8785_writes_it(value: Any) -> None:
    assert _ours(value) == _definition(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U00010000": 2},  # UTF-16 order: the astral key first
        {"a": 2**53 - 1, "b": -(2**53 - 1)},
        {"big": 2**53},  # refused by RFC 8785
        {"f": 1.0, "g": 1e21, "h": 1e-7},
        ("tuple", 1),
        {"s": "\ud800"},  # a lone surrogate: refused
        {"ctl": '\x00\x1f\x7f\u2028"\\/'},
        _nested(70),  # deeper than the fast path goes
        True,
        None,
        "",
        {},
        [],
    ],
)
def test_the_edges_of_the_fast_path(value: Any) -> None:
    assert _ours(value) == _definition(value)
