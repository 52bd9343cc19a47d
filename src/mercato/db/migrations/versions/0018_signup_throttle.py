"""`signups`: the accounts made on the sign-up page, per client address (a keyed digest) and
with the points each was granted, for the sign-up throttle and the daily grant cap
(decisions 0527, 0528).

Revision ID: 0018_signup_throttle
Revises: 0017_connection_max_in_flight
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0018_signup_throttle"
down_revision = "0017_connection_max_in_flight"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signups",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_signups"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_signups_account_id_accounts"
        ),
    )
    op.create_index("ix_signups_subject_created_at", "signups", ["subject", "created_at"])
    op.create_index("ix_signups_created_at", "signups", ["created_at"])


def downgrade() -> None:
    op.drop_table("signups")
