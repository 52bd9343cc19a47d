"""The version lifecycle: DRAFT → SUBMITTED → APPROVED | CHANGES_REQUESTED → PUBLISHED.

- `versions.state` takes the review states (and is wide enough for CHANGES_REQUESTED);
  `versions.submitted_run_id` names the conformance run a version was submitted with.
- `version_transitions`: every step with its actor, time and reason, never changed.

SQLite cannot change a CHECK constraint, so there the table is rebuilt (nothing references
`versions`) and its two guard triggers are made again as migration 0004 made them.

Revision ID: 0012
Revises: 0011_drop_money_functions
"""

from __future__ import annotations

import importlib
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from mercato.db.base import UTCDateTime

revision = "0012"
down_revision = "0011_drop_money_functions"
branch_labels = None
depends_on = None

_NEW_STATES = "state IN ('DRAFT', 'SUBMITTED', 'APPROVED', 'CHANGES_REQUESTED', 'PUBLISHED')"
_OLD_STATES = "state IN ('DRAFT', 'PUBLISHED')"
_COLUMNS = (
    "id, listing_id, number, label, state, display_name, connection_id, price, contract, "
    "contract_digest, has_artifact_contract, created_at, updated_at, published_at"
)


def _versions_table(name: str, states: str, *, with_run: bool) -> None:
    columns: list[sa.Column[Any]] = [
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("listing_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("label", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20 if with_run else 16), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("connection_id", sa.String(40), nullable=False),
        sa.Column("price", sa.Integer, nullable=False),
        sa.Column("contract", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("contract_digest", sa.String(64), nullable=False),
        sa.Column("has_artifact_contract", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("published_at", UTCDateTime),
    ]
    constraints: list[sa.Constraint] = [
        sa.PrimaryKeyConstraint("id", name="pk_versions"),
        sa.UniqueConstraint("listing_id", "number", name="uq_versions_listing_id_number"),
        sa.ForeignKeyConstraint(
            ["listing_id"], ["listings.id"], name="fk_versions_listing_id_listings"
        ),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["provider_connections.id"],
            name="fk_versions_connection_id_provider_connections",
        ),
        sa.CheckConstraint(states, name="ck_versions_state"),
        sa.CheckConstraint("number >= 1", name="ck_versions_number_positive"),
        sa.CheckConstraint("price >= 1", name="ck_versions_price_positive"),
        sa.CheckConstraint(
            "(state = 'PUBLISHED') = (published_at IS NOT NULL)", name="ck_versions_published_at"
        ),
    ]
    if with_run:
        columns.append(sa.Column("submitted_run_id", sa.String(40)))
        constraints.append(
            sa.ForeignKeyConstraint(
                ["submitted_run_id"],
                ["conformance_runs.id"],
                name="fk_versions_submitted_run_id_conformance_runs",
            )
        )
    op.create_table(name, *columns, *constraints)


def _rebuild_sqlite(states: str, *, with_run: bool) -> None:
    op.execute("DROP TRIGGER IF EXISTS trg_versions_published_frozen")
    op.execute("DROP TRIGGER IF EXISTS trg_versions_no_delete")
    _versions_table("versions_rebuilt", states, with_run=with_run)
    copy = f"INSERT INTO versions_rebuilt ({_COLUMNS}) SELECT {_COLUMNS} FROM versions"  # noqa: S608 (constants)
    op.execute(copy)
    op.drop_index("ix_versions_connection_id", table_name="versions")
    op.drop_table("versions")
    op.rename_table("versions_rebuilt", "versions")
    op.create_index("ix_versions_connection_id", "versions", ["connection_id"])
    catalog = importlib.import_module("mercato.db.migrations.versions.0004_catalog")
    refuse = "SELECT RAISE(ABORT, '{}');"
    frozen = catalog._changed(catalog._FROZEN_VERSION_COLUMNS, sql_is_not="IS NOT")
    op.execute(
        f"""CREATE TRIGGER trg_versions_published_frozen BEFORE UPDATE ON versions
        FOR EACH ROW WHEN OLD.state = 'PUBLISHED' AND ({frozen})
        BEGIN {refuse.format("VERSION_IMMUTABLE: a published version cannot change")} END"""
    )
    op.execute(
        f"""CREATE TRIGGER trg_versions_no_delete BEFORE DELETE ON versions
        BEGIN {refuse.format("VERSION_IMMUTABLE: versions are never deleted")} END"""
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("versions", "state", type_=sa.String(20), existing_nullable=False)
        op.drop_constraint("ck_versions_state", "versions", type_="check")
        op.create_check_constraint("ck_versions_state", "versions", _NEW_STATES)
        op.add_column("versions", sa.Column("submitted_run_id", sa.String(40)))
        op.create_foreign_key(
            "fk_versions_submitted_run_id_conformance_runs",
            "versions",
            "conformance_runs",
            ["submitted_run_id"],
            ["id"],
        )
    else:
        _rebuild_sqlite(_NEW_STATES, with_run=True)
    op.create_table(
        "version_transitions",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("version_id", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("from_state", sa.String(20)),
        sa.Column("to_state", sa.String(20), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("actor_id", sa.String(40)),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("run_id", sa.String(40)),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_version_transitions"),
        sa.UniqueConstraint("version_id", "seq", name="uq_version_transitions_version_id_seq"),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_version_transitions_version_id_versions"
        ),
        sa.ForeignKeyConstraint(
            ["actor_id"], ["accounts.id"], name="fk_version_transitions_actor_id_accounts"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["conformance_runs.id"],
            name="fk_version_transitions_run_id_conformance_runs",
        ),
        sa.CheckConstraint(
            "role IN ('provider', 'staff', 'operator')", name="ck_version_transitions_role"
        ),
    )


def downgrade() -> None:
    op.drop_table("version_transitions")
    # Versions in review states go back to DRAFT, the only unpublished state before.
    op.execute("UPDATE versions SET state = 'DRAFT' WHERE state <> 'PUBLISHED'")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(
            "fk_versions_submitted_run_id_conformance_runs", "versions", type_="foreignkey"
        )
        op.drop_column("versions", "submitted_run_id")
        op.drop_constraint("ck_versions_state", "versions", type_="check")
        op.create_check_constraint("ck_versions_state", "versions", _OLD_STATES)
        op.alter_column("versions", "state", type_=sa.String(16), existing_nullable=False)
    else:
        _rebuild_sqlite(_OLD_STATES, with_run=False)
