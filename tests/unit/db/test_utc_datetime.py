"""`UTCDateTime` reads a naive value as UTC exactly as `replace(tzinfo=UTC)` would (0470)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite

from mercato.db.base import UTCDateTime

_DIALECT = sqlite.dialect()


class _Sub(dt.datetime):
    pass


@given(st.datetimes(), st.sampled_from([0, 1]))
def test_a_naive_value_is_read_as_replace_would_make_it(naive: dt.datetime, fold: int) -> None:
    value = naive.replace(fold=fold)
    read = UTCDateTime().process_result_value(value, _DIALECT)
    expected = value.replace(tzinfo=dt.UTC)
    assert read is not None
    assert (type(read), read, read.fold, read.tzinfo) == (
        type(expected),
        expected,
        expected.fold,
        expected.tzinfo,
    )


def test_other_values_are_read_as_before() -> None:
    kind = UTCDateTime()
    aware = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert kind.process_result_value(aware, _DIALECT) is aware
    assert kind.process_result_value(None, _DIALECT) is None
    sub = kind.process_result_value(_Sub(2026, 1, 1, 12), _DIALECT)
    assert type(sub) is _Sub and sub.tzinfo is dt.UTC
