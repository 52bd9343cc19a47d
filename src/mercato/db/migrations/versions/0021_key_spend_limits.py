"""API key spend limits (DESIGN §8, decision 0590): `api_keys.spend_limit_points`,
`spend_limit_period`, `spend_period_start` and `spent_in_period` (the use of the current
period), and `invocations.api_key_id` (the key that made a call) with its index by time.

The CHECKs keep a limit whole (points and period together, or neither; points >= 0; a known
period) and the use non-negative, on both stores. SQLite takes a column constraint in ADD
COLUMN (it may name the other columns), so no table is rebuilt: each CHECK rides on the last
column it names.

Revision ID: 0021_key_spend_limits
Revises: 0020_publisher_and_examples
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0021_key_spend_limits"
down_revision = "0020_publisher_and_examples"
branch_labels = None
depends_on = None

_LIMIT = "ck_api_keys_spend_limit"
_LIMIT_RULE = (
    "(spend_limit_points IS NULL AND spend_limit_period IS NULL) OR "
    "(spend_limit_points IS NOT NULL AND spend_limit_points >= 0 "
    "AND spend_limit_period IS NOT NULL AND (spend_limit_period = 'DAY' "
    "OR spend_limit_period = 'WEEK' OR spend_limit_period = 'MONTH' "
    "OR spend_limit_period = 'TOTAL'))"
)
_SPENT = "ck_api_keys_spent_in_period"
_SPENT_RULE = "spent_in_period >= 0"
_INDEX = "ix_invocations_api_key_id_created_at"


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.add_column("api_keys", sa.Column("spend_limit_points", sa.BigInteger(), nullable=True))
    op.add_column("api_keys", sa.Column("spend_period_start", UTCDateTime(), nullable=True))
    if sqlite:
        op.execute(
            "ALTER TABLE api_keys ADD COLUMN spend_limit_period VARCHAR(5) "
            f"CONSTRAINT {_LIMIT} CHECK ({_LIMIT_RULE})"
        )
        op.execute(
            "ALTER TABLE api_keys ADD COLUMN spent_in_period BIGINT DEFAULT '0' NOT NULL "
            f"CONSTRAINT {_SPENT} CHECK ({_SPENT_RULE})"
        )
    else:
        op.add_column("api_keys", sa.Column("spend_limit_period", sa.String(5), nullable=True))
        op.add_column(
            "api_keys",
            sa.Column("spent_in_period", sa.BigInteger(), server_default="0", nullable=False),
        )
        op.create_check_constraint(op.f(_LIMIT), "api_keys", _LIMIT_RULE)
        op.create_check_constraint(op.f(_SPENT), "api_keys", _SPENT_RULE)
    op.add_column("invocations", sa.Column("api_key_id", sa.String(40), nullable=True))
    op.create_index(_INDEX, "invocations", ["api_key_id", "created_at"])


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="invocations")
    op.drop_column("invocations", "api_key_id")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f(_SPENT), "api_keys", type_="check")
        op.drop_constraint(op.f(_LIMIT), "api_keys", type_="check")
    # SQLite >= 3.35 drops them in place: each CHECK is its column's own constraint.
    for column in ("spent_in_period", "spend_limit_period", "spend_period_start"):
        op.drop_column("api_keys", column)
    op.drop_column("api_keys", "spend_limit_points")
