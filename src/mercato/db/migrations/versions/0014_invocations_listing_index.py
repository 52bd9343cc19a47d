"""`ix_invocations_account_id_id` becomes partial (`WHERE id IS NOT NULL`), decision 0371.

Every invoke first looks its Idempotency-Key up (`account_id = ? AND idempotency_key = ?`).
On a table without statistics yet (a fresh database: the first minute of a benchmark, of a
deployment) PostgreSQL priced the listing index (account_id, id) below the unique
(account_id, idempotency_key) one and cached that plan in each connection's prepared
statement: every lookup then read every call of the account (0.5 ms and ~1,000 buffers per
invoke after 2,000 calls, growing with them) until an autoanalyze replanned it. As a partial
index whose predicate the lookup does not imply, the listing index can no longer be chosen
for it; the receipts listing states the (always true) predicate and keeps using it. Same
columns, same order: nothing else changes.

Revision ID: 0014_invocations_listing_index
Revises: 0013_invocation_request_id
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_invocations_listing_index"
down_revision = "0013_invocation_request_id"
branch_labels = None
depends_on = None

_NAME = "ix_invocations_account_id_id"
_WHERE = sa.text("id IS NOT NULL")


def upgrade() -> None:
    op.drop_index(_NAME, table_name="invocations")
    op.create_index(
        _NAME,
        "invocations",
        ["account_id", "id"],
        postgresql_where=_WHERE,
        sqlite_where=_WHERE,
    )


def downgrade() -> None:
    op.drop_index(_NAME, table_name="invocations")
    op.create_index(_NAME, "invocations", ["account_id", "id"])
