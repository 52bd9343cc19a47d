"""Provider connections and conformance runs.

Revision ID: 0003_providers
Revises: 0002_ledger
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0003_providers"
down_revision = "0002_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_connections",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("base_url", sa.String(2048), nullable=False),
        sa.Column("credential_ciphertext", sa.Text, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("approved_revision", sa.Integer),
        sa.Column("approved_at", UTCDateTime),
        sa.Column("approved_by", sa.String(40)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_provider_connections"),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["accounts.id"], name="fk_provider_connections_owner_id_accounts"
        ),
        sa.UniqueConstraint("owner_id", "name", name="uq_provider_connections_owner_id_name"),
        sa.CheckConstraint("revision >= 1", name="ck_provider_connections_revision_positive"),
        sa.CheckConstraint(
            "approved_revision IS NULL OR approved_revision <= revision",
            name="ck_provider_connections_approved_revision_valid",
        ),
    )
    op.create_index("ix_provider_connections_owner_id", "provider_connections", ["owner_id"])
    op.create_table(
        "conformance_runs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("connection_id", sa.String(40), nullable=False),
        sa.Column("connection_revision", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_conformance_runs"),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["provider_connections.id"],
            name="fk_conformance_runs_connection_id_provider_connections",
        ),
    )
    op.create_index(
        "ix_conformance_runs_connection_id_started_at",
        "conformance_runs",
        ["connection_id", "started_at"],
    )
    op.create_table(
        "conformance_results",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "position", name="pk_conformance_results"),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["conformance_runs.id"],
            name="fk_conformance_results_run_id_conformance_runs",
        ),
        sa.CheckConstraint(
            "position BETWEEN 1 AND 9", name="ck_conformance_results_position_range"
        ),
        sa.CheckConstraint(
            "status IN ('passed', 'failed', 'skipped')", name="ck_conformance_results_status_valid"
        ),
    )


def downgrade() -> None:
    op.drop_table("conformance_results")
    op.drop_index("ix_conformance_runs_connection_id_started_at", table_name="conformance_runs")
    op.drop_table("conformance_runs")
    op.drop_index("ix_provider_connections_owner_id", table_name="provider_connections")
    op.drop_table("provider_connections")
