"""Catalog tables: listings, their exactly numbered versions, and holds."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime

DRAFT = "DRAFT"
SUBMITTED = "SUBMITTED"
APPROVED = "APPROVED"
CHANGES_REQUESTED = "CHANGES_REQUESTED"
PUBLISHED = "PUBLISHED"
VERSION_STATES = (DRAFT, SUBMITTED, APPROVED, CHANGES_REQUESTED, PUBLISHED)
ACTOR_ROLES = ("provider", "staff", "operator")
HOLD_KINDS = ("staff", "report")

JSONDocument = JSON().with_variant(JSONB(), "postgresql")


class Listing(Base):
    """A catalog entry owned by a provider account; the split is stored here, never shown."""

    __tablename__ = "listings"
    __table_args__ = (
        CheckConstraint(
            "provider_share_bps >= 0 AND provider_share_bps <= 10000", name="share_range"
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    service_code: Mapped[str] = mapped_column(String(100), unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    # The name the provider publishes under (decision 0560); None: not named yet.
    publisher_name: Mapped[str | None] = mapped_column(String(100))
    owner_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"), index=True)
    provider_share_bps: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class Version(Base):
    """One exact version `v<number>`; until PUBLISHED it can change (an edit after submission
    returns it to DRAFT), a PUBLISHED one never does. `submitted_run_id` is the conformance run
    of its connection it was last submitted with."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("listing_id", "number"),
        CheckConstraint(
            "state IN ('DRAFT', 'SUBMITTED', 'APPROVED', 'CHANGES_REQUESTED', 'PUBLISHED')",
            name="state",
        ),
        CheckConstraint("number >= 1", name="number_positive"),
        CheckConstraint("price >= 1", name="price_positive"),
        CheckConstraint("(state = 'PUBLISHED') = (published_at IS NOT NULL)", name="published_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    listing_id: Mapped[str] = mapped_column(String(40), ForeignKey("listings.id"))
    number: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(20))
    state: Mapped[str] = mapped_column(String(20))
    display_name: Mapped[str] = mapped_column(String(200))
    connection_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("provider_connections.id"), index=True
    )
    price: Mapped[int] = mapped_column(Integer)
    contract: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    contract_digest: Mapped[str] = mapped_column(String(64))
    has_artifact_contract: Mapped[bool] = mapped_column(Boolean)
    # [{"request", "result"}] the provider supplies beside the contract (decision 0561).
    examples: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDocument)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    published_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    submitted_run_id: Mapped[str | None] = mapped_column(
        String(40), ForeignKey("conformance_runs.id")
    )


class VersionTransition(Base):
    """One step of a version's lifecycle, with who took it, when and why; never changed."""

    __tablename__ = "version_transitions"
    __table_args__ = (
        UniqueConstraint("version_id", "seq"),
        CheckConstraint(
            "role IN ('provider', 'staff', 'operator')",
            name="role",
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(40), ForeignKey("versions.id"))
    seq: Mapped[int] = mapped_column(Integer)
    from_state: Mapped[str | None] = mapped_column(String(20))
    to_state: Mapped[str] = mapped_column(String(20))
    role: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[str | None] = mapped_column(String(40), ForeignKey("accounts.id"))
    reason: Mapped[str] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(40), ForeignKey("conformance_runs.id"))
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class Hold(Base):
    """A reason a listing is not public; released, never deleted."""

    __tablename__ = "holds"
    __table_args__ = (
        CheckConstraint("kind IN ('staff', 'report')", name="kind"),
        CheckConstraint("(released_at IS NULL) = (released_by IS NULL)", name="released"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    listing_id: Mapped[str] = mapped_column(String(40), ForeignKey("listings.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    released_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    released_by: Mapped[str | None] = mapped_column(String(100))
    case_id: Mapped[str | None] = mapped_column(String(40))
