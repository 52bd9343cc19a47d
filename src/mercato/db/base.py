"""Declarative base with a naming convention, shared by every domain's models."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, MetaData, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


_DATETIME = dt.datetime
_UTC = dt.UTC


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite forgets the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None or value.tzinfo:
            return value
        if type(value) is _DATETIME and not value.fold:
            # What `replace(tzinfo=UTC)` gives, built from positional arguments: `replace`
            # looks each of its nine keywords up by name (about 9,000 instructions a value in
            # CPython 3.11, two values a replay on SQLite; decision 0470).
            return _DATETIME(
                value.year,
                value.month,
                value.day,
                value.hour,
                value.minute,
                value.second,
                value.microsecond,
                _UTC,
            )
        return value.replace(tzinfo=_UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
