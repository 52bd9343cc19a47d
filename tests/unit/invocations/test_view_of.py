"""`view_of` makes the same `InvocationView` as its `__init__` (decision 0473)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mercato.invocations.schemas import InvocationView, view_of

_FIELDS = dataclasses.fields(InvocationView)
_values = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.integers(),
    st.booleans(),
    st.binary(max_size=5),
    st.datetimes(timezones=st.just(dt.UTC)),
)


@given(st.lists(_values, min_size=len(_FIELDS), max_size=len(_FIELDS)))
def test_a_full_row_makes_the_view_its_init_makes(row: list[object]) -> None:
    made = view_of(row)
    expected = InvocationView(*row)  # type: ignore[arg-type]
    assert type(made) is InvocationView
    assert made == expected
    assert [getattr(made, f.name) for f in _FIELDS] == row
    assert dataclasses.astuple(made) == dataclasses.astuple(expected)


def test_the_view_stays_frozen_and_a_short_row_takes_the_defaults() -> None:
    row = ["x"] * (len(_FIELDS) - 3)
    short = view_of(row)
    assert short == InvocationView(*row)  # type: ignore[arg-type]
    assert short.resolved_at is None
    full = view_of([*row, None, None, None])
    assert full == short
    with pytest.raises(dataclasses.FrozenInstanceError):
        full.state = "FAILED"  # type: ignore[misc]
