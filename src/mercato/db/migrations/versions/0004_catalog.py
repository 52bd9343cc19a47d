"""Listings, versions, holds.

Published versions are frozen and versions, listings and holds are never deleted: the
triggers below make the database refuse it too, whatever the code does.

Revision ID: 0004_catalog
Revises: 0003_providers
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from mercato.db.base import UTCDateTime

revision = "0004_catalog"
down_revision = "0003_providers"
branch_labels = None
depends_on = None

# Columns of a published version that never change again.
_FROZEN_VERSION_COLUMNS = (
    "listing_id",
    "number",
    "label",
    "state",
    "display_name",
    "connection_id",
    "price",
    "contract",
    "contract_digest",
    "has_artifact_contract",
    "published_at",
)
_FIXED_HOLD_COLUMNS = ("listing_id", "kind", "reason", "created_by", "created_at", "case_id")


def upgrade() -> None:
    op.create_table(
        "listings",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("service_code", sa.String(100), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("owner_id", sa.String(40), nullable=False),
        sa.Column("provider_share_bps", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_listings"),
        sa.UniqueConstraint("service_code", name="uq_listings_service_code"),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["accounts.id"], name="fk_listings_owner_id_accounts"
        ),
        sa.CheckConstraint(
            "provider_share_bps >= 0 AND provider_share_bps <= 10000",
            name="ck_listings_share_range",
        ),
    )
    op.create_index("ix_listings_owner_id", "listings", ["owner_id"])
    op.create_table(
        "versions",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("listing_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("label", sa.String(20), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("connection_id", sa.String(40), nullable=False),
        sa.Column("price", sa.Integer, nullable=False),
        sa.Column("contract", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("contract_digest", sa.String(64), nullable=False),
        sa.Column("has_artifact_contract", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("published_at", UTCDateTime),
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
        sa.CheckConstraint("state IN ('DRAFT', 'PUBLISHED')", name="ck_versions_state"),
        sa.CheckConstraint("number >= 1", name="ck_versions_number_positive"),
        sa.CheckConstraint("price >= 1", name="ck_versions_price_positive"),
        sa.CheckConstraint(
            "(state = 'PUBLISHED') = (published_at IS NOT NULL)", name="ck_versions_published_at"
        ),
    )
    op.create_index("ix_versions_connection_id", "versions", ["connection_id"])
    op.create_table(
        "holds",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("listing_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(100), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("released_at", UTCDateTime),
        sa.Column("released_by", sa.String(100)),
        sa.Column("case_id", sa.String(40)),
        sa.PrimaryKeyConstraint("id", name="pk_holds"),
        sa.ForeignKeyConstraint(
            ["listing_id"], ["listings.id"], name="fk_holds_listing_id_listings"
        ),
        sa.CheckConstraint("kind IN ('staff', 'report')", name="ck_holds_kind"),
        sa.CheckConstraint(
            "(released_at IS NULL) = (released_by IS NULL)", name="ck_holds_released"
        ),
    )
    op.create_index("ix_holds_listing_id", "holds", ["listing_id"])
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers()
    else:
        _sqlite_triggers()


def _changed(columns: tuple[str, ...], *, sql_is_not: str) -> str:
    return " OR ".join(f"NEW.{c} {sql_is_not} OLD.{c}" for c in columns)


def _sqlite_triggers() -> None:
    refuse = "SELECT RAISE(ABORT, '{}');"
    statements = [
        f"""CREATE TRIGGER trg_versions_published_frozen BEFORE UPDATE ON versions
        FOR EACH ROW WHEN OLD.state = 'PUBLISHED' AND ({_changed(_FROZEN_VERSION_COLUMNS, sql_is_not="IS NOT")})
        BEGIN {refuse.format("VERSION_IMMUTABLE: a published version cannot change")} END""",
        f"""CREATE TRIGGER trg_versions_no_delete BEFORE DELETE ON versions
        BEGIN {refuse.format("VERSION_IMMUTABLE: versions are never deleted")} END""",
        f"""CREATE TRIGGER trg_listings_no_delete BEFORE DELETE ON listings
        BEGIN {refuse.format("LISTING_PERMANENT: listings are never deleted")} END""",
        f"""CREATE TRIGGER trg_listings_code_stable BEFORE UPDATE OF service_code ON listings
        FOR EACH ROW WHEN NEW.service_code IS NOT OLD.service_code
        BEGIN {refuse.format("LISTING_PERMANENT: a service code never changes")} END""",
        f"""CREATE TRIGGER trg_holds_no_delete BEFORE DELETE ON holds
        BEGIN {refuse.format("HOLD_PERMANENT: holds are never deleted")} END""",
        f"""CREATE TRIGGER trg_holds_fixed BEFORE UPDATE ON holds
        FOR EACH ROW WHEN {_changed(_FIXED_HOLD_COLUMNS, sql_is_not="IS NOT")}
          OR (OLD.released_at IS NOT NULL AND (NEW.released_at IS NOT OLD.released_at
              OR NEW.released_by IS NOT OLD.released_by))
        BEGIN {refuse.format("HOLD_PERMANENT: a hold is released once and otherwise fixed")} END""",
    ]
    for statement in statements:
        op.execute(statement)


def _pg_function(name: str, body: str) -> str:
    return f"""CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
    {body}
    END $$"""


def _pg_raise(message: str) -> str:
    return f"RAISE EXCEPTION '{message}' USING ERRCODE = 'restrict_violation';"


def _postgresql_triggers() -> None:
    distinct = "IS DISTINCT FROM"
    statements = [
        _pg_function(
            "versions_guard",
            f"""IF TG_OP = 'DELETE' THEN
              {_pg_raise("VERSION_IMMUTABLE: versions are never deleted")}
            END IF;
            IF OLD.state = 'PUBLISHED' AND ({_changed(_FROZEN_VERSION_COLUMNS, sql_is_not=distinct)}) THEN
              {_pg_raise("VERSION_IMMUTABLE: a published version cannot change")}
            END IF;
            RETURN NEW;""",
        ),
        """CREATE TRIGGER trg_versions_guard BEFORE UPDATE OR DELETE ON versions
        FOR EACH ROW EXECUTE FUNCTION versions_guard()""",
        _pg_function(
            "listings_guard",
            f"""IF TG_OP = 'DELETE' THEN
              {_pg_raise("LISTING_PERMANENT: listings are never deleted")}
            END IF;
            IF NEW.service_code {distinct} OLD.service_code THEN
              {_pg_raise("LISTING_PERMANENT: a service code never changes")}
            END IF;
            RETURN NEW;""",
        ),
        """CREATE TRIGGER trg_listings_guard BEFORE UPDATE OR DELETE ON listings
        FOR EACH ROW EXECUTE FUNCTION listings_guard()""",
        _pg_function(
            "holds_guard",
            f"""IF TG_OP = 'DELETE' THEN
              {_pg_raise("HOLD_PERMANENT: holds are never deleted")}
            END IF;
            IF {_changed(_FIXED_HOLD_COLUMNS, sql_is_not=distinct)}
               OR (OLD.released_at IS NOT NULL AND (NEW.released_at {distinct} OLD.released_at
                   OR NEW.released_by {distinct} OLD.released_by)) THEN
              {_pg_raise("HOLD_PERMANENT: a hold is released once and otherwise fixed")}
            END IF;
            RETURN NEW;""",
        ),
        """CREATE TRIGGER trg_holds_guard BEFORE UPDATE OR DELETE ON holds
        FOR EACH ROW EXECUTE FUNCTION holds_guard()""",
    ]
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in ("holds", "versions", "listings"):
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_guard ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {table}_guard()")
    op.drop_table("holds")
    op.drop_table("versions")
    op.drop_table("listings")
