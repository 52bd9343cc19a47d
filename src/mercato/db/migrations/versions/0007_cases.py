"""Disputes and content reports.

Cases are never deleted (a trigger refuses it); one open dispute per invocation is a partial
unique index; a submission's Idempotency-Key is unique per account.

Revision ID: 0007_cases
Revises: 0006_artifacts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0007_cases"
down_revision = "0006_artifacts"
branch_labels = None
depends_on = None

_KINDS = "'DISPUTE', 'CONTENT_REPORT'"
_STATES = "'OPEN', 'APPROVED', 'REFUNDED', 'DENIED', 'UPHELD', 'DISMISSED'"
_CATEGORIES = "'ILLEGAL', 'INFRINGEMENT', 'MISLEADING', 'MALICIOUS', 'OTHER'"
_OPEN_DISPUTE = "kind = 'DISPUTE' AND state IN ('OPEN', 'APPROVED')"
_NO_DELETE = "CASE_PERMANENT: cases are never deleted"


def upgrade() -> None:
    op.create_table(
        "cases",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("idempotency_key", sa.String(191), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("statement", sa.Text, nullable=False),
        sa.Column("invocation_id", sa.String(40)),
        sa.Column("listing_id", sa.String(40)),
        sa.Column("service_code", sa.String(100)),
        sa.Column("version", sa.String(20)),
        sa.Column("category", sa.String(16)),
        sa.Column("decided_by", sa.String(100)),
        sa.Column("decided_at", UTCDateTime),
        sa.Column("decision_reason", sa.Text),
        sa.Column("refund_attempts", sa.Integer, nullable=False),
        sa.Column("refund_next_attempt_at", UTCDateTime),
        sa.Column("refund_last_error", sa.String(200)),
        sa.Column("refunded_at", UTCDateTime),
        sa.Column("hold_id", sa.String(40)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_cases"),
        sa.UniqueConstraint("account_id", "idempotency_key", name="uq_cases_account_id"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_cases_account_id_accounts"
        ),
        sa.ForeignKeyConstraint(
            ["invocation_id"], ["invocations.id"], name="fk_cases_invocation_id_invocations"
        ),
        sa.ForeignKeyConstraint(
            ["listing_id"], ["listings.id"], name="fk_cases_listing_id_listings"
        ),
        sa.ForeignKeyConstraint(["hold_id"], ["holds.id"], name="fk_cases_hold_id_holds"),
        sa.CheckConstraint(f"kind IN ({_KINDS})", name=op.f("ck_cases_kind")),
        sa.CheckConstraint(f"state IN ({_STATES})", name=op.f("ck_cases_state")),
        sa.CheckConstraint(
            "(kind = 'DISPUTE' AND state IN ('OPEN', 'APPROVED', 'REFUNDED', 'DENIED') "
            "AND invocation_id IS NOT NULL AND listing_id IS NULL AND category IS NULL) OR "
            "(kind = 'CONTENT_REPORT' AND state IN ('OPEN', 'UPHELD', 'DISMISSED') "
            "AND invocation_id IS NULL AND listing_id IS NOT NULL AND category IS NOT NULL)",
            name=op.f("ck_cases_kind_shape"),
        ),
        sa.CheckConstraint(
            f"category IS NULL OR category IN ({_CATEGORIES})", name=op.f("ck_cases_category")
        ),
        sa.CheckConstraint(
            "(state = 'OPEN') = (decided_at IS NULL) "
            "AND (decided_at IS NULL) = (decided_by IS NULL) "
            "AND (decided_at IS NULL) = (decision_reason IS NULL)",
            name=op.f("ck_cases_decision_evidence"),
        ),
        sa.CheckConstraint(
            "(state = 'REFUNDED') = (refunded_at IS NOT NULL)", name=op.f("ck_cases_refunded_at")
        ),
        sa.CheckConstraint(
            "(state = 'UPHELD') = (hold_id IS NOT NULL)", name=op.f("ck_cases_hold")
        ),
    )
    op.create_index("ix_cases_account_id_id", "cases", ["account_id", "id"])
    op.create_index(
        "ix_cases_state_refund_next_attempt_at", "cases", ["state", "refund_next_attempt_at"]
    )
    op.create_index(
        "uq_cases_open_dispute_invocation_id",
        "cases",
        ["invocation_id"],
        unique=True,
        sqlite_where=sa.text(_OPEN_DISPUTE),
        postgresql_where=sa.text(_OPEN_DISPUTE),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""CREATE FUNCTION cases_guard() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
            RAISE EXCEPTION '{_NO_DELETE}' USING ERRCODE = 'restrict_violation';
            END $$"""
        )
        op.execute(
            "CREATE TRIGGER trg_cases_guard BEFORE DELETE ON cases "
            "FOR EACH ROW EXECUTE FUNCTION cases_guard()"
        )
    else:
        op.execute(
            "CREATE TRIGGER trg_cases_no_delete BEFORE DELETE ON cases "
            f"BEGIN SELECT RAISE(ABORT, '{_NO_DELETE}'); END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS trg_cases_guard ON cases")
        op.execute("DROP FUNCTION IF EXISTS cases_guard()")
    op.drop_table("cases")
