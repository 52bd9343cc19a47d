"""The money tables' CHECK constraints spell their lists as comparisons (decision 0493).

`x IN ('a', 'b', 'c')` becomes `x = 'a' OR x = 'b' OR x = 'c'` in the CHECKs of
`ledger_accounts`, `ledger_transfers`, `reservations` and `invocations`: the same constraint in
three-valued logic (NULL exactly when x is NULL, the constants being non-NULL; same affinity
and collation, the column's). SQLite codes an IN list of three or more constants with an
ephemeral index built on every row it checks; the comparisons cost none. Names, columns and
every other constraint are unchanged.

- PostgreSQL: each constraint is dropped and added again with its new text.
- SQLite cannot change a CHECK, so each table is made again from its own `CREATE TABLE` text
  with only the CHECKs replaced (every column, type, key, foreign key and other CHECK as they
  are), its rows copied back, and its indexes and triggers made again from their own text.
  Other tables' foreign keys refer to these tables (ledger_entries, invocation_attempts,
  invocation_artifacts, cases), and the migration runs in one transaction with foreign keys
  on: `PRAGMA defer_foreign_keys` makes the dropped table's referenced rows count as
  outstanding until the new table holds them again; a row not copied back fails the commit.

Revision ID: 0016_money_checks_as_comparisons
Revises: 0015_hint_generation
"""

from __future__ import annotations

from alembic import op

revision = "0016_money_checks_as_comparisons"
down_revision = "0015_hint_generation"
branch_labels = None
depends_on = None

# table -> ((constraint name, the IN spelling, the comparisons), ...); the texts as migrations
# 0002 and 0005 wrote them (SQLite keeps a CHECK's text as written).
_CHECKS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ledger_accounts": (
        (
            "ck_ledger_accounts_kind",
            "kind IN ('available', 'reserved', 'earnings', 'revenue', 'issuance')",
            "kind = 'available' OR kind = 'reserved' OR kind = 'earnings' OR kind = 'revenue' "
            "OR kind = 'issuance'",
        ),
        (
            "ck_ledger_accounts_owner_kind",
            "(owner = 'platform' AND kind IN ('revenue', 'issuance')) OR "
            "(owner <> 'platform' AND kind IN ('available', 'reserved', 'earnings'))",
            "(owner = 'platform' AND (kind = 'revenue' OR kind = 'issuance')) OR "
            "(owner <> 'platform' AND (kind = 'available' OR kind = 'reserved' "
            "OR kind = 'earnings'))",
        ),
    ),
    "ledger_transfers": (
        (
            "ck_ledger_transfers_kind",
            "kind IN ('grant', 'reserve', 'settle', 'release', 'refund', 'payout')",
            "kind = 'grant' OR kind = 'reserve' OR kind = 'settle' OR kind = 'release' "
            "OR kind = 'refund' OR kind = 'payout'",
        ),
    ),
    "reservations": (
        (
            "ck_reservations_state",
            "state IN ('HELD', 'SETTLED', 'RELEASED', 'REFUNDED')",
            "state = 'HELD' OR state = 'SETTLED' OR state = 'RELEASED' OR state = 'REFUNDED'",
        ),
        (
            "ck_reservations_split_adds_up",
            "state IN ('HELD', 'RELEASED') OR "
            "(provider_amount >= 0 AND platform_amount >= 0 "
            "AND provider_amount + platform_amount = amount)",
            "state = 'HELD' OR state = 'RELEASED' OR "
            "(provider_amount >= 0 AND platform_amount >= 0 "
            "AND provider_amount + platform_amount = amount)",
        ),
    ),
    "invocations": (
        (
            # Migration 0005 named it with the prefix the naming convention adds again.
            "ck_invocations_ck_invocations_state",
            "state IN ('DISPATCHING','RETRY_WAIT','RECONCILING','SUCCEEDED','FAILED')",
            "state = 'DISPATCHING' OR state = 'RETRY_WAIT' OR state = 'RECONCILING' "
            "OR state = 'SUCCEEDED' OR state = 'FAILED'",
        ),
        (
            "ck_invocations_ck_invocations_settlement",
            "settlement IN ('PENDING','SETTLED','RELEASED','REFUNDED')",
            "settlement = 'PENDING' OR settlement = 'SETTLED' OR settlement = 'RELEASED' "
            "OR settlement = 'REFUNDED'",
        ),
    ),
}


def _respell(*, to_comparisons: bool) -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, checks in _CHECKS.items():
            for name, listed, compared in checks:
                op.drop_constraint(op.f(name), table, type_="check")
                new = compared if to_comparisons else listed
                op.create_check_constraint(op.f(name), table, new)
        return
    op.execute("PRAGMA defer_foreign_keys = ON")  # off again at the commit
    for table, checks in _CHECKS.items():
        pairs = [(listed, compared) for _, listed, compared in checks]
        _rebuild_sqlite(table, pairs if to_comparisons else [(n, o) for o, n in pairs])


def _rebuild_sqlite(table: str, pairs: list[tuple[str, str]]) -> None:
    """`table` made again from its own text with each `CHECK (old)` replaced by `CHECK (new)`."""
    bind = op.get_bind()
    (create,) = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).one()
    for old, new in pairs:
        if create.count(f"CHECK ({old})") != 1:
            raise RuntimeError(f"{table}: CHECK ({old}) not found once in {create!r}")
        create = create.replace(f"CHECK ({old})", f"CHECK ({new})")
    # Indexes (partial ones with their WHERE) and triggers as written; a key's own index
    # (sqlite_autoindex_…, no text) comes back with the table.
    others = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
        "AND sql IS NOT NULL ORDER BY type, name",
        (table,),
    ).all()
    columns = ", ".join(
        f'"{row[1]}"' for row in bind.exec_driver_sql(f'PRAGMA table_info("{table}")').all()
    )
    held = f"{table}__rows"
    op.execute(f'CREATE TABLE "{held}" AS SELECT {columns} FROM "{table}"')  # noqa: S608 (names)
    op.execute(f'DROP TABLE "{table}"')
    bind.exec_driver_sql(create)
    op.execute(f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM "{held}"')  # noqa: S608
    op.execute(f'DROP TABLE "{held}"')
    for (sql,) in others:
        bind.exec_driver_sql(sql)


def upgrade() -> None:
    _respell(to_comparisons=True)


def downgrade() -> None:
    _respell(to_comparisons=False)
