"""PostgreSQL: drop the money functions; every money rule is Python now (decision 0240).

Migrations 0008-0010 wrote the ledger transfer, the reservation, the settlement, the quota slot
and the invocation's accept and settle a second time, in PL/pgSQL. The services now build each
rule once as guarded SQLAlchemy Core statements (`mercato.ledger.rules`,
`mercato.invocations.money`, `mercato.quotas.service.slot_step`) and run them on PostgreSQL as
one data-modifying CTE per operation, so nothing calls these functions any more. The triggers
that guard the ledger's invariants (`ledger_forbid_change`, `ledger_check_transfer_balanced`,
migration 0002) stay.

Downgrade recreates them from the migrations that made them (they are unused by this code,
but an older release running on the downgraded schema calls them).

Revision ID: 0011_drop_money_functions
Revises: 0010_attempts_and_stuck
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0011_drop_money_functions"
down_revision = "0010_attempts_and_stuck"
branch_labels = None
depends_on = None

MONEY_FUNCTIONS = (
    "invocation_accept",
    "invocation_settle",
    "ledger_reserve",
    "ledger_settle",
    "quota_take_slot",
    "ledger_post_transfer",
)
"""Every database function that implemented a money rule (callers before callees)."""

_SIGNATURES = (
    "invocation_accept(text, text, text, text, text, text, text, text, text, text, text, "
    "integer, integer, boolean, integer, json, bytea, text, text, text, text, text, "
    "timestamptz, timestamptz, text, text[], text[], text, bigint, integer, "
    "integer, text, text)",
    "invocation_settle(text, text, text[], bytea, json, timestamptz, text, text[], text[])",
    "ledger_reserve(text, text, bigint, text, timestamptz, text, text[], text[])",
    "ledger_settle(text, text, integer, timestamptz, text, text[], text[])",
    "quota_take_slot(text, text, bigint, integer)",
    "ledger_post_transfer(text, text, text, text, timestamptz, text[], text[], bigint[], "
    "boolean[], text[], text[])",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in _SIGNATURES:
            op.execute(f"DROP FUNCTION IF EXISTS {signature}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    versions = "mercato.db.migrations.versions."
    transfer = importlib.import_module(versions + "0008_ledger_post_function")
    functions = importlib.import_module(versions + "0009_invocation_functions")
    attempts = importlib.import_module(versions + "0010_attempts_and_stuck")
    for sql in (
        transfer._CREATE,
        functions._LEDGER_RESERVE,
        functions._LEDGER_SETTLE,
        functions._QUOTA_TAKE_SLOT,
        attempts._INVOCATION_ACCEPT,
        functions._INVOCATION_SETTLE,
    ):
        op.execute(sql)
