"""`provider_connections.max_in_flight`: a connection's own bound on its calls in flight per
serve process (DESIGN §7, decision 0510).

Nullable: NULL is the process's default (`MERCATO_PROVIDER_MAX_IN_FLIGHT`); the ceiling is a
setting, checked by the service. The column's CHECK keeps it positive on both stores (SQLite
takes a column constraint in ADD COLUMN, so no table rebuild).

Revision ID: 0017_connection_max_in_flight
Revises: 0016_money_checks_as_comparisons
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_connection_max_in_flight"
down_revision = "0016_money_checks_as_comparisons"
branch_labels = None
depends_on = None

_CHECK = "ck_provider_connections_max_in_flight_positive"
_RULE = "max_in_flight IS NULL OR max_in_flight >= 1"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "ALTER TABLE provider_connections ADD COLUMN max_in_flight INTEGER "
            f"CONSTRAINT {_CHECK} CHECK ({_RULE})"
        )
        return
    op.add_column("provider_connections", sa.Column("max_in_flight", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f(_CHECK), "provider_connections", _RULE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f(_CHECK), "provider_connections", type_="check")
    # SQLite >= 3.35 drops it in place: its CHECK is the column's own constraint.
    op.drop_column("provider_connections", "max_in_flight")
