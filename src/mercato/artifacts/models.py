"""Tables: content-addressed blobs and each invocation's artifact manifest."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime


class ArtifactBlob(Base):
    """One stored object, keyed by its SHA-256; `data` is used only by the database store."""

    __tablename__ = "artifact_blobs"
    __table_args__ = (CheckConstraint("size >= 0", name="size_nonnegative"),)

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    data: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class InvocationArtifact(Base):
    """One manifest entry of a settled invocation, pending ingestion until `ingested_at`."""

    __tablename__ = "invocation_artifacts"
    __table_args__ = (
        PrimaryKeyConstraint("invocation_id", "artifact_id"),
        CheckConstraint("size >= 0", name="size_nonnegative"),
        CheckConstraint("attempts >= 0", name="attempts_nonnegative"),
    )

    invocation_id: Mapped[str] = mapped_column(String(40), ForeignKey("invocations.id"))
    artifact_id: Mapped[str] = mapped_column(String(128))
    position: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64), index=True)
    media_type: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    ingested_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Pending rows only; doubles as the lease expiry while a worker holds the row.
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(
        UTCDateTime, nullable=True, index=True
    )
    last_error: Mapped[str | None] = mapped_column(String(500), nullable=True)
