"""Per-attempt provider addresses, stuck calls and staff resolutions (decisions 0200-0202).

- `invocation_attempts`: one row per send, written before it: the connection revision, base
  URL and an HMAC of the credential that received it. Reconciliation asks exactly there.
  Active invocations get their current attempt from the connection as it stands now (the best
  knowledge there is; the credential digest stays unknown).
- `invocations.stuck_at` and the resolution columns; the worker's index gains `stuck_at`, so
  fresh work and stuck calls are two disjoint ranges of one index.
- PostgreSQL: `invocation_accept` also records attempt 1 (still one statement).

Revision ID: 0010_attempts_and_stuck
Revises: 0009_invocation_functions
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0010_attempts_and_stuck"
down_revision = "0009_invocation_functions"
branch_labels = None
depends_on = None

_OLD_ACCEPT = (
    "invocation_accept(text, text, text, text, text, text, text, text, text, text, text, "
    "integer, integer, boolean, integer, json, bytea, text, text, text, text, text, "
    "timestamptz, timestamptz, text, text[], text[], text, bigint, integer)"
)
_NEW_ACCEPT = (
    "invocation_accept(text, text, text, text, text, text, text, text, text, text, text, "
    "integer, integer, boolean, integer, json, bytea, text, text, text, text, text, "
    "timestamptz, timestamptz, text, text[], text[], text, bigint, integer, "
    "integer, text, text)"
)

_INVOCATION_ACCEPT = """
CREATE FUNCTION invocation_accept(
    p_id text, p_account_id text, p_idempotency_key text, p_fingerprint text, p_channel text,
    p_service_code text, p_version text, p_version_id text, p_contract_digest text,
    p_connection_id text, p_provider_account_id text, p_provider_share_bps integer,
    p_price integer, p_has_artifact_contract boolean, p_response_max_bytes integer,
    p_result_schema json, p_payload bytea, p_provider_key text, p_state text,
    p_settlement text, p_reservation_id text, p_lease_owner text,
    p_lease_expires_at timestamptz, p_now timestamptz,
    p_transfer_id text, p_entry_ids text[], p_new_account_ids text[],
    p_policy text, p_window_start bigint, p_limit integer,
    p_connection_revision integer, p_base_url text, p_credential_digest text
) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    -- The intent first: a same-key twin stops at its unique key before touching anything
    -- shared; the account's balances and its quota window are locked last.
    INSERT INTO invocations (
        id, account_id, idempotency_key, fingerprint, channel, service_code, version,
        version_id, contract_digest, connection_id, provider_account_id, provider_share_bps,
        price, has_artifact_contract, response_max_bytes, result_schema, payload,
        provider_key, state, settlement, reservation_id, sends, reconciliations,
        next_attempt_at, lease_owner, lease_expires_at, created_at, updated_at)
    VALUES (
        p_id, p_account_id, p_idempotency_key, p_fingerprint, p_channel, p_service_code,
        p_version, p_version_id, p_contract_digest, p_connection_id, p_provider_account_id,
        p_provider_share_bps, p_price, p_has_artifact_contract, p_response_max_bytes,
        p_result_schema, p_payload, p_provider_key, p_state, p_settlement, p_reservation_id,
        1, 0, p_now, p_lease_owner, p_lease_expires_at, p_now, p_now);
    -- Where the first send goes, recorded before it is made.
    INSERT INTO invocation_attempts (
        invocation_id, attempt, connection_revision, base_url, credential_digest, sent_at)
    VALUES (p_id, 1, p_connection_revision, p_base_url, p_credential_digest, p_now);
    PERFORM ledger_reserve(p_reservation_id, p_account_id, p_price, p_id, p_now,
                           p_transfer_id, p_entry_ids, p_new_account_ids);
    RETURN quota_take_slot(p_account_id, p_policy, p_window_start, p_limit);
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "invocation_attempts",
        sa.Column("invocation_id", sa.String(40), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("connection_revision", sa.Integer, nullable=False),
        sa.Column("base_url", sa.String(2048), nullable=False),
        sa.Column("credential_digest", sa.String(64), nullable=True),
        sa.Column("sent_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("invocation_id", "attempt", name="pk_invocation_attempts"),
        sa.ForeignKeyConstraint(
            ["invocation_id"],
            ["invocations.id"],
            name="fk_invocation_attempts_invocation_id_invocations",
        ),
    )
    for column in (
        sa.Column("stuck_at", UTCDateTime, nullable=True),
        sa.Column("resolution_decision", sa.String(16), nullable=True),
        sa.Column("resolution_reason", sa.Text, nullable=True),
        sa.Column("resolved_by", sa.String(64), nullable=True),
        sa.Column("resolved_at", UTCDateTime, nullable=True),
    ):
        op.add_column("invocations", column)
    op.drop_index("ix_invocations_state_next_attempt_at", table_name="invocations")
    op.create_index(
        "ix_invocations_state_stuck_at_next_attempt_at",
        "invocations",
        ["state", "stuck_at", "next_attempt_at"],
    )
    op.execute(
        "INSERT INTO invocation_attempts (invocation_id, attempt, connection_revision, "
        "base_url, credential_digest, sent_at) "
        "SELECT i.id, i.sends, c.revision, c.base_url, NULL, i.updated_at "
        "FROM invocations i JOIN provider_connections c ON c.id = i.connection_id "
        "WHERE i.state IN ('DISPATCHING','RETRY_WAIT','RECONCILING')"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {_OLD_ACCEPT}")
        op.execute(_INVOCATION_ACCEPT)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_NEW_ACCEPT}")
        previous = importlib.import_module(
            "mercato.db.migrations.versions.0009_invocation_functions"
        )
        op.execute(previous._INVOCATION_ACCEPT)
    op.drop_index("ix_invocations_state_stuck_at_next_attempt_at", table_name="invocations")
    op.create_index(
        "ix_invocations_state_next_attempt_at", "invocations", ["state", "next_attempt_at"]
    )
    for name in ("resolved_at", "resolved_by", "resolution_reason", "resolution_decision"):
        op.drop_column("invocations", name)
    op.drop_column("invocations", "stuck_at")
    op.drop_table("invocation_attempts")
