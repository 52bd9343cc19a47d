"""`listings.publisher_name`: the name a provider publishes under, shown on the caller's pages;
`versions.examples`: an example request and result the provider supplies with a version,
validated against the version's own schemas (decisions 0560, 0561).

Revision ID: 0020_publisher_and_examples
Revises: 0019_version_outcomes_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020_publisher_and_examples"
down_revision = "0019_version_outcomes_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN on both stores: a batch copy would drop the versions table's triggers.
    op.add_column("listings", sa.Column("publisher_name", sa.String(100), nullable=True))
    op.add_column(
        "versions",
        sa.Column("examples", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("versions", "examples")
    op.drop_column("listings", "publisher_name")
