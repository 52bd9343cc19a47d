"""`invocations.request_id`: the id of the request that accepted the call (decision 0276).

Nullable: calls accepted before this migration, and calls accepted outside a request, have
none. The worker puts it on its log lines about the call, so they join the request's line.

Revision ID: 0013_invocation_request_id
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_invocation_request_id"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN of a nullable column needs no table rebuild on SQLite.
    op.add_column("invocations", sa.Column("request_id", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("invocations", "request_id")  # SQLite >= 3.35 drops it in place (as 0010)
