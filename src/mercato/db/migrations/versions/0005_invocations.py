"""Quotas and invocations.

Revision ID: 0005_invocations
Revises: 0004_catalog
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0005_invocations"
down_revision = "0004_catalog"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quota_overrides",
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("limit_count", sa.Integer, nullable=False),
        sa.Column("window_seconds", sa.Integer, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("account_id", name="pk_quota_overrides"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_quota_overrides_account_id_accounts"
        ),
    )
    op.create_table(
        "quota_windows",
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("window_start", sa.BigInteger, nullable=False),
        sa.Column("accepted", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("account_id", "policy", name="pk_quota_windows"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_quota_windows_account_id_accounts"
        ),
    )
    op.create_table(
        "invocations",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("idempotency_key", sa.String(191), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("service_code", sa.String(200), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("version_id", sa.String(40), nullable=False),
        sa.Column("contract_digest", sa.String(64), nullable=False),
        sa.Column("connection_id", sa.String(40), nullable=False),
        sa.Column("provider_account_id", sa.String(40), nullable=False),
        sa.Column("provider_share_bps", sa.Integer, nullable=False),
        sa.Column("price", sa.Integer, nullable=False),
        sa.Column("has_artifact_contract", sa.Boolean, nullable=False),
        sa.Column("response_max_bytes", sa.Integer, nullable=False),
        sa.Column("result_schema", sa.JSON, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("provider_key", sa.String(120), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("settlement", sa.String(16), nullable=False),
        sa.Column("reservation_id", sa.String(40), nullable=False),
        sa.Column("sends", sa.Integer, nullable=False),
        sa.Column("reconciliations", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime, nullable=True),
        sa.Column("lease_owner", sa.String(40), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime, nullable=True),
        sa.Column("last_reason", sa.String(200), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("provider_http_status", sa.Integer, nullable=True),
        sa.Column("result", sa.LargeBinary, nullable=True),
        sa.Column("artifacts", sa.JSON, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("settled_at", UTCDateTime, nullable=True),
        sa.Column("refunded_at", UTCDateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_invocations"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_invocations_account_id_accounts"
        ),
        sa.UniqueConstraint("account_id", "idempotency_key", name="uq_invocations_account_id"),
        sa.CheckConstraint(
            "state IN ('DISPATCHING','RETRY_WAIT','RECONCILING','SUCCEEDED','FAILED')",
            name="ck_invocations_state",
        ),
        sa.CheckConstraint(
            "settlement IN ('PENDING','SETTLED','RELEASED','REFUNDED')",
            name="ck_invocations_settlement",
        ),
    )
    op.create_index("ix_invocations_account_id_id", "invocations", ["account_id", "id"])
    op.create_index(
        "ix_invocations_state_next_attempt_at", "invocations", ["state", "next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_invocations_state_next_attempt_at", table_name="invocations")
    op.drop_index("ix_invocations_account_id_id", table_name="invocations")
    op.drop_table("invocations")
    op.drop_table("quota_windows")
    op.drop_table("quota_overrides")
