"""No database function implements a money rule (decision 0240): after migrating, PostgreSQL
holds only the trigger functions that guard the ledger's invariants; migration 0011 dropped
the PL/pgSQL money functions of 0008-0010 and its downgrade brings them back."""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import Engine, create_engine, text

from mercato.db.engine import make_engine
from mercato.db.migrate import alembic_config, upgrade
from mercato.db.uow import Database

pytestmark = pytest.mark.postgres_only

PG_ADMIN_URL = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MONEY_FUNCTIONS = (
    "ledger_post_transfer",
    "invocation_accept",
    "invocation_settle",
    "ledger_reserve",
    "ledger_settle",
    "quota_take_slot",
)
TRIGGER_FUNCTIONS = {"ledger_forbid_change", "ledger_check_transfer_balanced"}

_FUNCTIONS = text(
    "SELECT p.proname, p.prorettype::regtype::text FROM pg_proc p "
    "JOIN pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"
)


def _functions(engine: Engine) -> set[str]:
    return set(_returning(engine))


def _returning(engine: Engine) -> dict[str, str]:
    """Each function of the schema and the type it returns."""
    with engine.connect() as conn:
        return {name: returns for name, returns in conn.execute(_FUNCTIONS)}


def test_no_money_function_is_left_in_the_migrated_schema(db: Database) -> None:
    found = _returning(db.engine)
    assert not set(found) & set(MONEY_FUNCTIONS), found
    # Every function left is a trigger function (the ledger's guard its invariants).
    assert set(found) >= TRIGGER_FUNCTIONS
    assert set(found.values()) == {"trigger"}, found
    with db.engine.connect() as conn:
        triggers = set(
            conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")).scalars()
        )
    assert {
        "trg_ledger_transfers_append_only",
        "trg_ledger_entries_append_only",
        "trg_ledger_entries_transfer_balanced",
    } <= triggers


def test_downgrading_0011_brings_the_functions_back_and_upgrading_drops_them(
    postgres_template: object,
) -> None:
    from alembic import command

    if postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    name = f"mercato_fn_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = make_engine(f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}")
    try:
        upgrade(engine)
        assert not _functions(engine) & set(MONEY_FUNCTIONS)
        command.downgrade(alembic_config(engine), "0010_attempts_and_stuck")
        assert set(MONEY_FUNCTIONS) <= _functions(engine)
        upgrade(engine)
        assert not _functions(engine) & set(MONEY_FUNCTIONS)
        assert set(_returning(engine).values()) == {"trigger"}
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
