"""A step's write described as `guarded.Write` (issue 40): the compiler spells it from the
description, with or without its RETURNING, and reads no part of a finished statement."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam
from sqlalchemy.dialects import sqlite

from mercato.db import guarded

metadata = MetaData()
accounts = Table(
    "accounts",
    metadata,
    Column("id", String, primary_key=True),
    Column("owner", String, nullable=False, unique=True),
    Column("balance", Integer, nullable=False),
)
DIALECT = sqlite.dialect()


def _sql(statement: Any) -> str:
    return str(statement.compile(dialect=DIALECT))


def _refs() -> guarded.Refs:
    return guarded.Refs("sqlite", None, {})


def test_returning_answers_a_copy_and_the_statement_stays_bare() -> None:
    refs = _refs()
    values = {"id": refs.param("id", String), "owner": refs.param("owner", String)}
    bare = guarded.insert_select(refs, accounts, {**values, "balance": guarded.inline(0)})
    returning = bare.returning(accounts.c.id)
    assert bare.returned == () and returning.returned == (accounts.c.id,)
    assert "RETURNING" not in _sql(returning.statement)
    spelled = _sql(returning.returning_statement())
    assert spelled.endswith(" RETURNING id")
    assert spelled.partition(" RETURNING")[0] == _sql(bare.statement)


def test_an_upsert_and_an_update_record_what_they_set() -> None:
    refs = _refs()
    values = {"id": refs.param("id", String), "owner": refs.param("owner", String)}
    write = guarded.insert_select(refs, accounts, {**values, "balance": guarded.inline(1)})
    upsert = write.on_conflict_do_update(
        index_elements=[accounts.c.owner],
        set_={"balance": accounts.c.balance + write.excluded.balance},
    )
    assert upsert.conflict == ("owner",) and upsert.updated == frozenset({"balance"})
    assert "ON CONFLICT (owner) DO UPDATE" in _sql(upsert.statement)
    nothing = write.on_conflict_do_nothing()
    assert nothing.conflict is None and "DO NOTHING" in _sql(nothing.statement)
    update = guarded.update_where(
        accounts, {"balance": accounts.c.balance - 1}, accounts.c.id == bindparam("p_id")
    )
    assert update.updated == frozenset({"balance"})


def test_a_write_without_what_its_spelling_needs_keeps_its_returning() -> None:
    """An UPDATE described without the columns it sets, or an insert of several rows whose row
    is read, is never counted."""
    from sqlalchemy import select, update

    def loose_update(refs: guarded.Refs) -> Any:
        statement = update(accounts).where(accounts.c.id == refs.param("id", String))
        return guarded.Write(statement.values(balance=0)).returning(accounts.c.id)

    def rows(refs: guarded.Refs) -> Any:
        chosen = select(refs.param("id", String), refs.param("owner", String), 0)
        return guarded.insert_rows(accounts, ["id", "owner", "balance"], chosen).returning(
            accounts.c.id
        )

    for build in (loose_update, rows):
        step = guarded.Step("w", build, guarded.Empty.SKIP)
        program = guarded.Program("w", (step,), (("w", "id"),))
        (item,) = guarded.compile_program(program, "sqlite").steps
        assert not item.counted and "RETURNING" in _sql(item.statement)
        unread = guarded.Program("w", (step,))
        (item,) = guarded.compile_program(unread, "sqlite").steps
        assert item.counted == (build is rows)
