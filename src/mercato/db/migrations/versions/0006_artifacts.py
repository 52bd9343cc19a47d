"""Artifact blobs and invocation artifacts.

Revision ID: 0006_artifacts
Revises: 0005_invocations
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0006_artifacts"
down_revision = "0005_invocations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "artifact_blobs",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("media_type", sa.String(255), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=True),
        sa.PrimaryKeyConstraint("digest", name="pk_artifact_blobs"),
        sa.CheckConstraint("size >= 0", name="ck_artifact_blobs_size_nonnegative"),
    )
    op.create_table(
        "invocation_artifacts",
        sa.Column("invocation_id", sa.String(40), nullable=False),
        sa.Column("artifact_id", sa.String(128), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("ingested_at", UTCDateTime, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime, nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("invocation_id", "artifact_id", name="pk_invocation_artifacts"),
        sa.ForeignKeyConstraint(
            ["invocation_id"],
            ["invocations.id"],
            name="fk_invocation_artifacts_invocation_id_invocations",
        ),
        sa.CheckConstraint("size >= 0", name="ck_invocation_artifacts_size_nonnegative"),
        sa.CheckConstraint("attempts >= 0", name="ck_invocation_artifacts_attempts_nonnegative"),
    )
    op.create_index("ix_invocation_artifacts_digest", "invocation_artifacts", ["digest"])
    op.create_index(
        "ix_invocation_artifacts_next_attempt_at", "invocation_artifacts", ["next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_invocation_artifacts_next_attempt_at", table_name="invocation_artifacts")
    op.drop_index("ix_invocation_artifacts_digest", table_name="invocation_artifacts")
    op.drop_table("invocation_artifacts")
    op.drop_table("artifact_blobs")
