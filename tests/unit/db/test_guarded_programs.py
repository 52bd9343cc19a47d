"""The guarded-statement runner (decision 0240): each program is built and compiled once per
dialect, and a refusal's tag survives the trip through PostgreSQL's error message."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.sql.compiler import SQLCompiler

from builders.ledger import ledger_account
from mercato.core.clock import utcnow
from mercato.db import guarded, runner
from mercato.db.uow import Database
from mercato.invocations import money
from mercato.ledger import service as ledger
from mercato.ledger.errors import InsufficientPoints


def test_a_program_is_built_and_compiled_once_per_dialect(db: Database) -> None:
    dialect = db.engine.dialect
    first = guarded.compiled(money.ACCEPT, dialect.name)
    assert guarded.compiled(money.ACCEPT, dialect.name) is first
    assert runner.sync_runnable(money.ACCEPT, dialect) is runner.sync_runnable(
        money.ACCEPT, dialect
    )
    assert (first.statement is None) == (dialect.name == "sqlite")


def test_running_a_rule_compiles_nothing(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = ledger_account(db, "caller")
    with db.transaction() as session:  # both rules compiled here, once
        ledger.grant(session, account_id=caller, amount=5, now=utcnow())
        ledger.reserve(session, account_id=caller, amount=1, reference="inv_w", now=utcnow())
    compiled: list[str] = []
    original = SQLCompiler.__init__

    def counting(self: SQLCompiler, dialect: object, statement: object, *a: Any, **k: Any) -> None:
        compiled.append(type(statement).__name__)
        original(self, dialect, statement, *a, **k)  # type: ignore[arg-type]

    # The dialects' upserts cannot use SQLAlchemy's statement cache: a rule that were not
    # precompiled would be compiled again on every run.
    monkeypatch.setattr(SQLCompiler, "__init__", counting)
    with db.transaction() as session:
        ledger.grant(session, account_id=caller, amount=5, now=utcnow())
        with pytest.raises(InsufficientPoints), session.begin_nested():
            ledger.reserve(session, account_id=caller, amount=11, reference="inv_x", now=utcnow())
    monkeypatch.undo()
    assert not [name for name in compiled if name in {"Insert", "Update", "Select"}], compiled
    with db.read() as session:
        assert ledger.balances(session, account_id=caller).available == 9


@pytest.mark.parametrize(
    ("message", "code", "detail"),
    [
        (
            'invalid input syntax for type integer: "mercato-refusal|short|7|10|0"',
            "short",
            ("7", "10"),
        ),
        (
            'invalid input syntax for type integer: "mercato-refusal|resolved||0"',
            "resolved",
            (None,),
        ),
        ('invalid input syntax for type integer: "mercato-refusal|quota|0"', "quota", ()),
    ],
)
def test_a_refusal_tag_is_read_back(
    message: str, code: str, detail: tuple[str | None, ...]
) -> None:
    refused = runner.parse_refusal(message)
    assert refused is not None and (refused.code, refused.detail) == (code, detail)


def test_an_unrelated_error_is_not_a_refusal() -> None:
    assert runner.parse_refusal('invalid input syntax for type integer: "abc"') is None


def test_a_group_takes_the_money_lock_exclusively_and_changes_nothing_else() -> None:
    from mercato.db.aio_postgres import asyncpg_dialect

    built = guarded.compiled(money.ACCEPT, "postgresql")
    assert built.statement is not None and built.exclusive is not None
    sql = str(built.statement.compile(dialect=asyncpg_dialect()))
    grouped = str(built.exclusive.compile(dialect=asyncpg_dialect()))
    shared = f"pg_advisory_xact_lock_shared({guarded.MONEY_LOCK})"
    alone = f"pg_advisory_xact_lock({guarded.MONEY_LOCK})"
    assert sql.count(shared) == 1 and shared not in grouped and alone not in sql
    assert grouped.count(alone) == 1
    assert grouped.replace(alone, shared) == sql
