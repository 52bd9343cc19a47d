"""`hint_generation`: one row counting the changes to what the hot invoke keeps in memory
(decision 0400). Every write to a watched table adds one to it in its own transaction; the
accept program of a call served from memory runs only while it still holds the value the
call's hints were read at.

Revision ID: 0015_hint_generation
Revises: 0014_invocations_listing_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_hint_generation"
down_revision = "0014_invocations_listing_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "hint_generation",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "value": 0}])


def downgrade() -> None:
    op.drop_table("hint_generation")
