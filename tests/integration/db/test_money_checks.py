"""The money tables' CHECKs spelled as comparisons (migration 0016, decision 0493): the same
constraints as the IN lists they replace, made on SQLite by rebuilding each table with every
row, index, trigger and foreign key kept; the models state what the migration made."""

from __future__ import annotations

import datetime as dt
import importlib
import itertools
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import CheckConstraint, Engine, Table, create_engine, exc, insert, text

from builders.ledger import ledger_account
from mercato.core.clock import utcnow
from mercato.db.engine import make_engine
from mercato.db.migrate import alembic_config, upgrade
from mercato.db.uow import Database
from mercato.invocations.models import Invocation
from mercato.ledger.models import LedgerAccount, LedgerTransfer, Reservation

MIGRATION = importlib.import_module(
    "mercato.db.migrations.versions.0016_money_checks_as_comparisons"
)
TABLES: dict[str, Table] = {
    model.__tablename__: model.__table__  # type: ignore[misc]
    for model in (LedgerAccount, LedgerTransfer, Reservation, Invocation)
}
BEFORE = "0015_hint_generation"


# --- the two spellings agree ----------------------------------------------------------------

GRID: dict[str, list[Any]] = {
    "kind": [None, "available", "reserved", "earnings", "revenue", "issuance", "grant",
             "reserve", "settle", "release", "refund", "payout", "bogus", ""],
    "owner": [None, "platform", "acc_1"],
    "state": [None, "HELD", "SETTLED", "RELEASED", "REFUNDED", "DISPATCHING", "RETRY_WAIT",
              "RECONCILING", "SUCCEEDED", "FAILED", "bogus", "held"],
    "settlement": [None, "PENDING", "SETTLED", "RELEASED", "REFUNDED", "bogus"],
    "provider_amount": [None, 0, 3, -1],
    "platform_amount": [None, 2],
    "amount": [5],
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "listed", "compared"),
    [check for checks in MIGRATION._CHECKS.values() for check in checks],
    ids=lambda value: value if value.startswith("ck_") else "",
)
def test_the_comparisons_agree_with_the_in_list_in_three_valued_logic(
    name: str, listed: str, compared: str
) -> None:
    """Over every combination of listed, unlisted and NULL values of the columns it reads,
    each CHECK's two spellings give the same answer (true, false or NULL)."""
    columns = [column for column in GRID if column in listed]
    raw = sqlite3.connect(":memory:")
    try:
        raw.execute(f"CREATE TABLE grid ({', '.join(columns)})")
        rows = list(itertools.product(*(GRID[column] for column in columns)))
        raw.executemany(f"INSERT INTO grid VALUES ({', '.join('?' * len(columns))})", rows)
        answers = raw.execute(f"SELECT ({listed}), ({compared}) FROM grid").fetchall()
    finally:
        raw.close()
    assert len(answers) == len(rows) > 1
    assert all(old == new for old, new in answers), [
        (row, answer) for row, answer in zip(rows, answers, strict=True) if answer[0] != answer[1]
    ]


# --- the models state the migrated constraints ----------------------------------------------


def test_the_models_state_the_migrated_checks(db: Database) -> None:
    with db.engine.connect() as conn:
        for name, table in TABLES.items():
            checks = [c for c in table.constraints if isinstance(c, CheckConstraint)]
            if db.engine.dialect.name == "sqlite":
                (create,) = conn.execute(
                    text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :n"),
                    {"n": name},
                ).one()
                assert " IN (" not in create, create
                for check in checks:
                    assert f"CHECK ({check.sqltext})" in create, (name, check.name)
            else:
                found = conn.execute(
                    text(
                        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE contype = 'c' AND conrelid = CAST(:n AS regclass)"
                    ),
                    {"n": name},
                ).scalars()
                assert [d for d in found if "ANY" in d or " IN (" in d] == [], name
        for checks in MIGRATION._CHECKS.values():
            for _, _, compared in checks:
                assert any(
                    str(c.sqltext) == compared
                    for table in TABLES.values()
                    for c in table.constraints
                    if isinstance(c, CheckConstraint)
                ), compared


# --- the constraints still refuse -----------------------------------------------------------


def _valid(table: Table, account: str) -> dict[str, Any]:
    """A row every constraint of `table` accepts (each NOT NULL column given a value)."""
    now = utcnow()
    row: dict[str, Any] = {}
    for column in table.columns:
        if column.nullable and not column.primary_key:
            continue
        if column.foreign_keys or column.name in ("account_id", "owner"):
            row[column.name] = account
            continue
        try:
            kind: type = column.type.python_type
        except NotImplementedError:  # UTCDateTime
            kind = dt.datetime
        row[column.name] = {
            str: f"v{uuid.uuid4().hex[:12]}",
            int: 5,
            bool: False,
            dict: {},
            bytes: b"",
        }.get(kind, now)
    fixed = {
        "ledger_accounts": {"kind": "available", "balance": 0},
        "ledger_transfers": {"kind": "grant"},
        "reservations": {"state": "HELD"},
        "invocations": {"state": "DISPATCHING", "settlement": "PENDING"},
    }[table.name]
    return {**row, **fixed}


CASES = [
    ("ledger_accounts", {}, True),
    ("ledger_accounts", {"owner": "platform", "kind": "revenue"}, True),
    ("ledger_accounts", {"kind": "bogus"}, False),
    ("ledger_accounts", {"kind": None}, False),
    ("ledger_accounts", {"owner": "platform", "kind": "available"}, False),
    ("ledger_accounts", {"kind": "issuance"}, False),
    ("ledger_transfers", {"kind": "payout"}, True),
    ("ledger_transfers", {"kind": "bogus"}, False),
    ("ledger_transfers", {"kind": "Grant"}, False),
    ("ledger_transfers", {"kind": None}, False),
    ("reservations", {}, True),
    ("reservations", {"state": "SETTLED", "provider_amount": 3, "platform_amount": 2}, True),
    ("reservations", {"state": "bogus"}, False),
    ("reservations", {"state": None}, False),
    # A CHECK that comes out NULL passes, under either spelling: a settled reservation
    # without its split is not refused by this constraint (as it was not before).
    ("reservations", {"state": "SETTLED"}, True),
    ("reservations", {"state": "SETTLED", "provider_amount": -1, "platform_amount": 6}, False),
    ("reservations", {"state": "SETTLED", "provider_amount": 3, "platform_amount": 1}, False),
    ("invocations", {}, True),
    ("invocations", {"state": "FAILED", "settlement": "REFUNDED"}, True),
    ("invocations", {"state": "bogus"}, False),
    ("invocations", {"state": None}, False),
    ("invocations", {"settlement": "bogus"}, False),
    ("invocations", {"settlement": None}, False),
]


@pytest.mark.parametrize(
    ("table", "given", "accepted"), CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_the_respelled_checks_accept_and_refuse_as_before(
    db: Database, table: str, given: dict[str, Any], accepted: bool
) -> None:
    account = ledger_account(db, "checks")
    row = {**_valid(TABLES[table], account), **given}
    if not accepted:
        with pytest.raises(exc.IntegrityError), db.engine.begin() as conn:
            conn.execute(insert(TABLES[table]), row)
        return
    with db.engine.begin() as conn:
        conn.execute(insert(TABLES[table]), row)


# --- the SQLite rebuild keeps everything ----------------------------------------------------

_ROWS = [
    "INSERT INTO accounts VALUES ('acc_a', 'a@example.com', NULL, 0, '2026-11-27 10:00:00')",
    "INSERT INTO accounts VALUES ('acc_b', 'b@example.com', 'h', 1, '2026-11-27 10:00:01')",
    "INSERT INTO ledger_accounts VALUES ('la_i', 'platform', 'issuance', -10)",
    "INSERT INTO ledger_accounts VALUES ('la_r', 'platform', 'revenue', 0)",
    "INSERT INTO ledger_accounts VALUES ('la_a', 'acc_a', 'available', 6)",
    "INSERT INTO ledger_accounts VALUES ('la_h', 'acc_a', 'reserved', 4)",
    "INSERT INTO ledger_transfers VALUES ('tr_1', 'grant', NULL, 'g', '2026-11-27 10:00:02')",
    "INSERT INTO ledger_transfers VALUES ('tr_2', 'reserve', 'res_1', '', '2026-11-27 10:00:03')",
    "INSERT INTO ledger_entries VALUES ('le_1', 'tr_1', 'la_i', -10)",
    "INSERT INTO ledger_entries VALUES ('le_2', 'tr_1', 'la_a', 10)",
    "INSERT INTO ledger_entries VALUES ('le_3', 'tr_2', 'la_a', -4)",
    "INSERT INTO ledger_entries VALUES ('le_4', 'tr_2', 'la_h', 4)",
    "INSERT INTO reservations VALUES ('res_1', 'acc_a', 'inv_1', 4, 'HELD', NULL, NULL, NULL, "
    "'2026-11-27 10:00:03', NULL, NULL)",
    "INSERT INTO reservations VALUES ('res_2', 'acc_a', 'inv_0', 1, 'SETTLED', 'acc_b', 1, 0, "
    "'2026-11-27 09:00:00', '2026-11-27 09:00:01', NULL)",
]


def _invocation_row() -> str:
    values = (
        "'inv_1', 'acc_a', 'key-1', 'f', 'API_KEY', 'svc', 'v1', 'ver_1', 'c', 'con_1', 'acc_b', "
        "7000, 4, 0, 4096, '{\"type\": \"object\"}', X'7B7D', 'pk', 'DISPATCHING', 'PENDING', "
        "'res_1', 1, 0, NULL, 'lease', '2026-11-27 10:01:00', NULL, NULL, NULL, NULL, NULL, "
        "'2026-11-27 10:00:03', '2026-11-27 10:00:03', NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "'req-1'"
    )
    return f"INSERT INTO invocations VALUES ({values})"


def _snapshot(engine: Engine) -> tuple[dict[str, list[Any]], set[tuple[Any, ...]]]:
    """Every row of every table, and every schema object (type, name, table, text)."""
    with engine.connect() as conn:
        schema = set(
            conn.execute(text("SELECT type, name, tbl_name, sql FROM sqlite_master")).all()
        )
        tables = sorted(name for kind, name, _, _ in schema if kind == "table")
        rows = {
            name: sorted(
                (tuple(r) for r in conn.exec_driver_sql(f'SELECT * FROM "{name}"')),
                key=repr,
            )
            for name in tables
        }
    return rows, schema


@pytest.mark.sqlite_only
def test_the_sqlite_rebuild_keeps_every_row_index_trigger_and_key(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'mercato.db'}")
    try:
        upgrade(engine, BEFORE)
        with engine.begin() as conn:
            for statement in (*_ROWS, _invocation_row()):
                conn.exec_driver_sql(statement)
            conn.exec_driver_sql(
                "INSERT INTO invocation_attempts VALUES "
                "('inv_1', 1, 1, 'https://p.example', NULL, '2026-11-27 10:00:03')"
            )
        rows, schema = _snapshot(engine)
        assert all(rows[name] for name in TABLES) and rows["invocation_attempts"]

        upgrade(engine, MIGRATION.revision)  # this migration, not whatever head is later
        after_rows, after_schema = _snapshot(engine)
        assert after_rows.pop("alembic_version") == [(MIGRATION.revision,)]
        assert after_rows == {k: v for k, v in rows.items() if k != "alembic_version"}
        rebuilt = {(kind, name) for kind, name, table, _ in schema if table in TABLES}
        # Everything but the four tables' own text is as it was: indexes (the partial one with
        # its WHERE), triggers, the other tables.
        unchanged = {o for o in schema if not (o[0] == "table" and o[1] in TABLES)}
        assert unchanged <= after_schema
        assert {(kind, name) for kind, name, table, _ in after_schema if table in TABLES} == (
            rebuilt
        )
        for _, name, _, sql in after_schema:
            if name in TABLES:
                assert " IN (" not in sql, sql
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
            assert conn.exec_driver_sql("PRAGMA integrity_check").all() == [("ok",)]
            fks = conn.exec_driver_sql("PRAGMA foreign_key_list(reservations)").all()
            assert {fk[3] for fk in fks} == {"account_id", "provider_account_id"}
        # The append-only guard and the foreign keys still hold on the rebuilt tables.
        with pytest.raises(exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql("UPDATE ledger_transfers SET memo = 'x'")
        with pytest.raises(exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM ledger_accounts WHERE id = 'la_a'")
        with pytest.raises(exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM invocations")

        command.downgrade(alembic_config(engine), BEFORE)
        assert _snapshot(engine) == (rows, schema)
    finally:
        engine.dispose()


@pytest.mark.postgres_only
def test_postgres_downgrade_and_upgrade_respell_the_constraints(postgres_template: object) -> None:
    """On PostgreSQL the constraints are dropped and added again, each way."""
    if postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    admin_url = os.environ.get(
        "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    name = f"mercato_ck_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = make_engine(f"{admin_url.rsplit('/', 1)[0]}/{name}")

    def definitions() -> dict[str, str]:
        with engine.connect() as conn:
            return dict(
                conn.execute(
                    text(
                        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE contype = 'c' AND conrelid::regclass::text = ANY(:t)"
                    ),
                    {"t": list(TABLES)},
                ).all()
            )

    try:
        upgrade(engine, BEFORE)
        before = definitions()
        upgrade(engine)
        after = definitions()
        assert set(after) == set(before)
        respelled = {name for checks in MIGRATION._CHECKS.values() for name, _, _ in checks}
        assert {n for n in after if after[n] != before[n]} == respelled
        assert not [d for d in after.values() if "ANY" in d]
        command.downgrade(alembic_config(engine), BEFORE)
        assert definitions() == before
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
