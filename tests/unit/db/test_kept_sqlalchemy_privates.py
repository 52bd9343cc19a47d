"""The SQLAlchemy private name `mercato.db` still reads (decision 0601) behaves as the code
assumes: the test fails when SQLAlchemy changes under it."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.dialects import sqlite

metadata = MetaData()
accounts = Table(
    "accounts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String, nullable=False, unique=True),
    Column("balance", Integer, nullable=False),
)
DIALECT = sqlite.dialect()


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
