"""`ix_invocations_version_id_created_at`: a version's last calls, counted by outcome on its
provider's page, are read from this index, not from a scan of every call (decision 0556).

Revision ID: 0019_version_outcomes_index
Revises: 0018_signup_throttle
"""

from __future__ import annotations

from alembic import op

revision = "0019_version_outcomes_index"
down_revision = "0018_signup_throttle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_invocations_version_id_created_at", "invocations", ["version_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_invocations_version_id_created_at", table_name="invocations")
