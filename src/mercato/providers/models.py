"""Provider connections and the stored history of their conformance runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime


class ProviderConnection(Base):
    """Base URL + encrypted credential; approved exactly when approved_revision == revision."""

    __tablename__ = "provider_connections"
    __table_args__ = (
        UniqueConstraint("owner_id", "name", name="uq_provider_connections_owner_id_name"),
        CheckConstraint("revision >= 1", name="revision_positive"),
        CheckConstraint(
            "approved_revision IS NULL OR approved_revision <= revision",
            name="approved_revision_valid",
        ),
        CheckConstraint(
            "max_in_flight IS NULL OR max_in_flight >= 1", name="max_in_flight_positive"
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    base_url: Mapped[str] = mapped_column(String(2048))
    credential_ciphertext: Mapped[str] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(Integer)
    approved_revision: Mapped[int | None] = mapped_column(Integer)
    approved_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    approved_by: Mapped[str | None] = mapped_column(String(40))
    # Calls in flight per serve process (DESIGN §7); NULL: MERCATO_PROVIDER_MAX_IN_FLIGHT.
    # Not part of the revision: changing it lapses no approval.
    max_in_flight: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    @property
    def approved(self) -> bool:
        return revision_approved(self.approved_revision, self.revision)


class ConformanceRun(Base):
    """One run of the nine checks against one revision of a connection."""

    __tablename__ = "conformance_runs"
    __table_args__ = (
        Index("ix_conformance_runs_connection_id_started_at", "connection_id", "started_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    connection_id: Mapped[str] = mapped_column(String(40), ForeignKey("provider_connections.id"))
    connection_revision: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    passed: Mapped[bool] = mapped_column(Boolean)


class ConformanceResult(Base):
    """One check's verdict with its evidence (status, outcome, latency; never a secret)."""

    __tablename__ = "conformance_results"
    __table_args__ = (
        CheckConstraint("position BETWEEN 1 AND 9", name="position_range"),
        CheckConstraint("status IN ('passed', 'failed', 'skipped')", name="status_valid"),
    )

    run_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("conformance_runs.id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


def revision_approved(approved_revision: int | None, revision: int) -> bool:
    """A connection is approved exactly when its current revision is the approved one."""
    return approved_revision is not None and approved_revision == revision
