"""Accounts, API keys, sessions.

Revision ID: 0001_accounts
Revises: None
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mercato.db.base import UTCDateTime

revision = "0001_accounts"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(200)),
        sa.Column("is_staff", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_accounts"),
        sa.UniqueConstraint("email", name="uq_accounts_email"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("last_used_at", UTCDateTime),
        sa.Column("revoked_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_api_keys_account_id_accounts"
        ),
        sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
    )
    op.create_index("ix_api_keys_account_id", "api_keys", ["account_id"])
    op.create_table(
        "session_families",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("account_id", sa.String(40), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("revoked_at", UTCDateTime),
        sa.Column("revoked_reason", sa.String(20)),
        sa.PrimaryKeyConstraint("id", name="pk_session_families"),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_session_families_account_id_accounts"
        ),
    )
    op.create_index("ix_session_families_account_id", "session_families", ["account_id"])
    op.create_table(
        "refresh_tokens",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("family_id", sa.String(40), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("issued_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("spent_at", UTCDateTime),
        sa.PrimaryKeyConstraint("id", name="pk_refresh_tokens"),
        sa.ForeignKeyConstraint(
            ["family_id"],
            ["session_families.id"],
            name="fk_refresh_tokens_family_id_session_families",
        ),
        sa.UniqueConstraint("digest", name="uq_refresh_tokens_digest"),
    )
    op.create_index("ix_refresh_tokens_family_id", "refresh_tokens", ["family_id"])
    op.create_table(
        "login_attempts",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("attempted_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_login_attempts"),
    )
    op.create_index(
        "ix_login_attempts_subject_attempted_at", "login_attempts", ["subject", "attempted_at"]
    )


def downgrade() -> None:
    op.drop_table("login_attempts")
    op.drop_table("refresh_tokens")
    op.drop_table("session_families")
    op.drop_table("api_keys")
    op.drop_table("accounts")
