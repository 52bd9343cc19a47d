"""Statements compiled once for a bare driver: the right SQL and values per call, a bounded
cache that lets statements built per call go, and driver errors as SQLAlchemy's classes."""

from __future__ import annotations

import datetime as dt
import gc
import sqlite3
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, exc, insert, select
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite as sqlite_dialect

from mercato.db.aio_postgres import asyncpg_dialect
from mercato.db.aio_statements import Statements, sqlalchemy_error
from mercato.db.base import UTCDateTime

T = Table(
    "t",
    MetaData(),
    Column("id", String(10), primary_key=True),
    Column("n", Integer),
    Column("at", UTCDateTime),
)
_BY_ID = select(T.c.id, T.c.at).where(T.c.id == bindparam("id"), T.c.n > 3)


def test_a_module_level_statement_is_compiled_once_for_asyncpg() -> None:
    statements = Statements(asyncpg_dialect())
    prepared = statements.prepare(_BY_ID, {"id": "a"})
    assert statements.prepare(_BY_ID, {"id": "b"}) is prepared
    sql, values = prepared.bind({"id": "a"})
    assert "$1::VARCHAR" in sql and "$2::INTEGER" in sql
    assert values == ["a", 3]


def test_bind_and_result_processors_apply_the_types() -> None:
    statements = Statements(asyncpg_dialect())
    prepared = statements.prepare(insert(T), {"id": "a", "at": None})
    paris = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    sql, values = prepared.bind({"id": "a", "at": paris})
    assert sql.startswith("INSERT INTO t (id, at)")  # the columns of the keys given
    assert values == ["a", paris]
    assert values[1].tzinfo == dt.UTC
    with pytest.raises(ValueError, match="naive"):
        prepared.bind({"id": "a", "at": dt.datetime(2026, 1, 1)})
    read = statements.prepare(_BY_ID)
    assert read.row(("a", dt.datetime(2026, 1, 1))) == ("a", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))


def test_a_missing_required_parameter_is_refused() -> None:
    prepared = Statements(asyncpg_dialect()).prepare(_BY_ID)
    with pytest.raises(exc.InvalidRequestError, match="'id'"):
        prepared.bind({})


def test_values_missing_from_the_parameters_come_from_the_statement() -> None:
    statements = Statements(asyncpg_dialect())
    noon = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    made = select(T.c.id).where(
        T.c.at == bindparam("at", callable_=lambda: noon, type_=UTCDateTime),
        T.c.n == bindparam("n", value=7, required=False),
    )
    prepared = statements.prepare(made)
    # given: taken as is (and processed by its type); missing: its callable, or its value
    paris = dt.datetime(2026, 1, 1, 13, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert prepared.bind({"at": paris, "n": 1})[1] == [paris, 1]
    assert prepared.bind({"at": paris})[1][1] == 7
    values = prepared.bind({"n": 2})[1]
    assert values == [noon, 2] and values[0].tzinfo == dt.UTC
    assert prepared.bind(None)[1] == [noon, 7]
    one = statements.prepare(select(T.c.id).where(T.c.id == bindparam("id")))
    assert one.bind({"id": "a", "other": 1})[1] == ["a"]
    none = statements.prepare(select(T.c.id))
    assert none.bind({"id": "a"})[1] == []


def test_defaults_are_filled_per_call_and_a_required_value_is_still_refused() -> None:
    statements = Statements(asyncpg_dialect())
    counter = iter(range(10))
    made = select(T.c.id).where(
        T.c.n == bindparam("made", callable_=lambda: next(counter), type_=Integer),
        T.c.id == bindparam("id"),
        T.c.n > 3,  # a literal of the statement
    )
    prepared = statements.prepare(made)
    # each call that lacks the made value makes a new one; a given one is not made
    assert prepared.bind({"id": "a"})[1] == [0, "a", 3]
    assert prepared.bind({"id": "b", "made": 9})[1] == [9, "b", 3]
    assert prepared.bind({"id": "c"})[1] == [1, "c", 3]
    with pytest.raises(exc.InvalidRequestError, match="'id'"):
        prepared.bind({"made": 1})  # after the statement took the defaults path
    literal = statements.prepare(select(T.c.id).where(T.c.n > 5, T.c.id == bindparam("id")))
    assert literal.bind({"id": "x"})[1] == [5, "x"]
    with pytest.raises(exc.InvalidRequestError, match="'id'"):
        literal.bind({})


def test_rows_are_read_back_through_their_types() -> None:
    statements = Statements(asyncpg_dialect())
    read = statements.prepare(_BY_ID)
    assert read.rows([("a", None), ("b", dt.datetime(2026, 1, 1))]) == [
        ("a", None),
        ("b", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
    ]
    plain = statements.prepare(select(T.c.id, T.c.n))
    raw = [("a", 1), ("b", 2)]
    assert plain.rows(raw) == raw
    assert plain.rows([["a", 1]]) == [("a", 1)]  # a driver's record becomes a tuple


def test_the_per_call_cache_is_bounded_and_forgets_dead_statements() -> None:
    statements = Statements(asyncpg_dialect(), per_call_limit=5)
    for column in range(50):
        # 50 shapes (a different label each), none kept by the caller
        statements.prepare(select(T.c.id.label(f"c{column}")))
    gc.collect()
    assert len(statements._compiled) == 5
    # only the statements the 5 kept compiled forms were compiled from are still alive
    assert len(statements._by_identity) == 5


def test_expanding_parameters_render_per_call() -> None:
    statements = Statements(asyncpg_dialect())
    in_ids = select(T.c.n).where(T.c.id.in_(bindparam("ids", expanding=True)))
    prepared = statements.prepare(in_ids)
    sql, values = prepared.bind({"ids": ["a", "b", "c"]})
    assert "$3" in sql and values == ["a", "b", "c"]
    sql, values = prepared.bind({"ids": ["x"]})
    assert "$2" not in sql and values == ["x"]


# asyncpg numbers its placeholders ($1 is the timestamp, rendered before the expanded list);
# SQLite's `?` are in the text's order.
@pytest.mark.parametrize(
    ("dialect", "list_first"),
    [(asyncpg_dialect(), False), (sqlite_dialect(), True)],
    ids=["asyncpg", "sqlite"],
)
def test_a_literal_in_list_built_per_call_expands_with_its_own_processed_values(
    dialect: Any, list_first: bool
) -> None:
    """The slow path: a literal list, expanded per call, and a processed type at once."""
    statements = Statements(dialect)
    paris = dt.timezone(dt.timedelta(hours=1))

    def build(ids: list[str], hour: int) -> Any:
        at = dt.datetime(2026, 1, 1, hour, tzinfo=paris)
        return select(T.c.n).where(T.c.id.in_(ids), T.c.at > at)

    first = statements.prepare(build(["a", "b"], 10))
    second = statements.prepare(build(["x", "y", "z"], 12))
    process = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)

    def at(hour: int) -> Any:
        value = dt.datetime(2026, 1, 1, hour, tzinfo=paris)
        return value if process is None else process(value)

    def expected(ids: list[str], hour: int) -> list[Any]:
        return [*ids, at(hour)] if list_first else [at(hour), *ids]

    values = second.bind(None)[1]
    assert values == expected(["x", "y", "z"], 12)
    stamp = values[-1 if list_first else 0]
    # processed: SQLite's text, or made UTC for asyncpg (an aware datetime compares equal
    # across zones, so the zone itself is checked)
    assert isinstance(stamp, str) or stamp.tzinfo == dt.UTC
    assert first.bind(None)[1] == expected(["a", "b"], 10)
    assert at(12) != at(10)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (sqlite3.IntegrityError("UNIQUE constraint failed"), exc.IntegrityError),
        (sqlite3.OperationalError("database is locked"), exc.OperationalError),
        (sqlite3.ProgrammingError("x"), exc.ProgrammingError),
        (asyncpg.UniqueViolationError("duplicate key"), exc.IntegrityError),
        (asyncpg.ForeignKeyViolationError("fk"), exc.IntegrityError),
        (asyncpg.SerializationError("could not serialize"), exc.OperationalError),
        (asyncpg.DeadlockDetectedError("deadlock"), exc.OperationalError),
        (asyncpg.QueryCanceledError("cancelled"), exc.OperationalError),
        (asyncpg.InvalidTextRepresentationError("bad"), exc.DataError),
        (asyncpg.UndefinedTableError("no table"), exc.ProgrammingError),
        (asyncpg.RaiseError("append-only"), exc.InternalError),
        (asyncpg.ConnectionDoesNotExistError("closed"), exc.OperationalError),
        (ConnectionResetError("reset"), exc.OperationalError),
    ],
)
def test_driver_errors_become_sqlalchemys(error: BaseException, kind: type[Exception]) -> None:
    mapped = sqlalchemy_error(error, "SELECT 1")
    assert type(mapped) is kind
    assert mapped.orig is error
    if isinstance(error, asyncpg.PostgresError):
        assert mapped.orig.sqlstate == error.sqlstate  # type: ignore[union-attr]
