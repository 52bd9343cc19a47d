"""The SQLAlchemy private names `mercato.db` still reads (decisions 0600, 0601) behave as the
code assumes: each test fails when SQLAlchemy changes under them."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.dialects.sqlite.dml import OnConflictDoNothing, OnConflictDoUpdate

metadata = MetaData()
accounts = Table(
    "accounts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String, nullable=False, unique=True),
    Column("balance", Integer, nullable=False),
)
DIALECT = sqlite.dialect()


def _sql(statement: object) -> str:
    return str(statement.compile(dialect=DIALECT))  # type: ignore[attr-defined]


# --- 0600: the counted SQLite steps read a statement's parts and drop its RETURNING ----------


def test_an_insert_from_select_names_its_columns_and_its_on_conflict_clause() -> None:
    chosen = select(accounts.c.id, accounts.c.owner, accounts.c.balance)
    plain = sqlite_insert(accounts).from_select(["id", "owner", "balance"], chosen)
    assert list(plain._select_names) == ["id", "owner", "balance"]
    assert plain.select is chosen
    assert getattr(plain, "_post_values_clause", None) is None
    nothing = plain.on_conflict_do_nothing()
    assert isinstance(nothing._post_values_clause, OnConflictDoNothing)
    upsert = plain.on_conflict_do_update(
        index_elements=[accounts.c.owner], set_={"balance": accounts.c.balance + 1}
    )
    assert isinstance(upsert._post_values_clause, OnConflictDoUpdate)
    assert [c.name for c in upsert._post_values_clause.inferred_target_elements] == ["owner"]


def test_an_update_keeps_its_set_values_where_the_spelling_reads_them() -> None:
    by_values = update(accounts).values(balance=accounts.c.balance + 1)
    assert [getattr(key, "name", key) for key in by_values._values] == ["balance"]
    assert not by_values._ordered_values
    assert not by_values._multi_values
    ordered = update(accounts).ordered_values((accounts.c.balance, 5), (accounts.c.owner, "x"))
    assert [getattr(key, "name", key) for key, _ in ordered._ordered_values] == [
        "balance",
        "owner",
    ]


def test_a_generated_copy_without_returning_drops_only_the_returning() -> None:
    statement = (
        update(accounts)
        .where(accounts.c.owner == "a")
        .values(balance=accounts.c.balance + 1)
        .returning(accounts.c.id)
    )
    bare = statement._generate()
    bare._returning = ()
    assert bare is not statement
    assert "RETURNING" in _sql(statement)
    assert _sql(bare) == _sql(statement).partition(" RETURNING")[0]


# --- 0601: the compiled-statement cache is keyed by SQLAlchemy's cache key -------------------


def test_statements_of_one_shape_share_a_cache_key_and_extract_their_literals() -> None:
    first = select(accounts.c.id).where(accounts.c.owner == "a", accounts.c.balance > 3)
    second = select(accounts.c.id).where(accounts.c.owner == "b", accounts.c.balance > 7)
    other = select(accounts.c.owner).where(accounts.c.id == 1)
    one, two, three = (s._generate_cache_key() for s in (first, second, other))
    assert one is not None and two is not None and three is not None
    assert one.key == two.key
    assert one.key != three.key
    assert [bind.value for bind in one.bindparams] == ["a", 3]
    assert [bind.value for bind in two.bindparams] == ["b", 7]
    # The compiled form of the first statement takes the second's literals.
    compiled = first.compile(dialect=DIALECT, cache_key=one)
    assert compiled.construct_params(extracted_parameters=two.bindparams) == {
        "owner_1": "b",
        "balance_1": 7,
    }
