"""The points ledger: ledger accounts, append-only transfers and entries, reservations.

Revision ID: 0002_ledger
Revises: 0001_accounts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0002_ledger"
down_revision = "0001_accounts"
branch_labels = None
depends_on = None

_APPEND_ONLY = ("ledger_transfers", "ledger_entries")

_PG_FORBID_CHANGE = """
CREATE FUNCTION ledger_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END
$$
"""

# Checked at commit (deferred), so a transfer is judged with all its legs in place.
_PG_CHECK_TRANSFER = """
CREATE FUNCTION ledger_check_transfer_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total BIGINT;
BEGIN
    SELECT COALESCE(SUM(amount), 0) INTO total FROM ledger_entries
        WHERE transfer_id = NEW.transfer_id;
    IF total <> 0 THEN
        RAISE EXCEPTION 'ledger transfer % does not balance (sum %)', NEW.transfer_id, total;
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "ledger_accounts",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("balance", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_accounts"),
        sa.UniqueConstraint("owner", "kind", name="uq_ledger_accounts_owner_kind"),
        sa.CheckConstraint(
            "kind IN ('available', 'reserved', 'earnings', 'revenue', 'issuance')",
            name=op.f("ck_ledger_accounts_kind"),
        ),
        sa.CheckConstraint(
            "kind = 'issuance' OR balance >= 0",
            name=op.f("ck_ledger_accounts_balance_non_negative"),
        ),
        sa.CheckConstraint(
            "(owner = 'platform' AND kind IN ('revenue', 'issuance')) OR "
            "(owner <> 'platform' AND kind IN ('available', 'reserved', 'earnings'))",
            name=op.f("ck_ledger_accounts_owner_kind"),
        ),
    )
    op.create_table(
        "ledger_transfers",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reference", sa.String(100)),
        sa.Column("memo", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_transfers"),
        sa.CheckConstraint(
            "kind IN ('grant', 'reserve', 'settle', 'release', 'refund', 'payout')",
            name=op.f("ck_ledger_transfers_kind"),
        ),
    )
    op.create_index("ix_ledger_transfers_reference", "ledger_transfers", ["reference"])
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("transfer_id", sa.String(40), nullable=False),
        sa.Column("ledger_account_id", sa.String(40), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_entries"),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["ledger_transfers.id"],
            name="fk_ledger_entries_transfer_id_ledger_transfers",
        ),
        sa.ForeignKeyConstraint(
            ["ledger_account_id"],
            ["ledger_accounts.id"],
            name="fk_ledger_entries_ledger_account_id_ledger_accounts",
        ),
        sa.CheckConstraint("amount <> 0", name=op.f("ck_ledger_entries_amount_non_zero")),
    )
    op.create_index("ix_ledger_entries_transfer_id", "ledger_entries", ["transfer_id"])
    op.create_index("ix_ledger_entries_ledger_account_id", "ledger_entries", ["ledger_account_id"])
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("reference", sa.String(100), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("provider_account_id", sa.String(40)),
        sa.Column("provider_amount", sa.BigInteger),
        sa.Column("platform_amount", sa.BigInteger),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("refunded_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_reservations"),
        sa.UniqueConstraint("reference", name="uq_reservations_reference"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_reservations_account_id_accounts"
        ),
        sa.ForeignKeyConstraint(
            ["provider_account_id"],
            ["accounts.id"],
            name="fk_reservations_provider_account_id_accounts",
        ),
        sa.CheckConstraint("amount > 0", name=op.f("ck_reservations_amount_positive")),
        sa.CheckConstraint(
            "state IN ('HELD', 'SETTLED', 'RELEASED', 'REFUNDED')",
            name=op.f("ck_reservations_state"),
        ),
        sa.CheckConstraint(
            "state IN ('HELD', 'RELEASED') OR "
            "(provider_amount >= 0 AND platform_amount >= 0 "
            "AND provider_amount + platform_amount = amount)",
            name=op.f("ck_reservations_split_adds_up"),
        ),
    )
    op.create_index("ix_reservations_account_id", "reservations", ["account_id"])
    _create_triggers()


def _create_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FORBID_CHANGE)
        for table in _APPEND_ONLY:
            op.execute(
                f"CREATE TRIGGER trg_{table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION ledger_forbid_change()"
            )
        op.execute(_PG_CHECK_TRANSFER)
        op.execute(
            "CREATE CONSTRAINT TRIGGER trg_ledger_entries_transfer_balanced "
            "AFTER INSERT ON ledger_entries DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION ledger_check_transfer_balanced()"
        )
        return
    for table in _APPEND_ONLY:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER trg_{table}_no_{action.lower()} BEFORE {action} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {action} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS trg_ledger_entries_transfer_balanced ON ledger_entries")
        for table in _APPEND_ONLY:
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_append_only ON {table}")
        op.execute("DROP FUNCTION IF EXISTS ledger_check_transfer_balanced()")
        op.execute("DROP FUNCTION IF EXISTS ledger_forbid_change()")
    op.drop_table("reservations")
    op.drop_table("ledger_entries")
    op.drop_table("ledger_transfers")
    op.drop_table("ledger_accounts")
