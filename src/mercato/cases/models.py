"""The `cases` table: disputes and content reports, decided by staff, never deleted.

One row per submission. Disputes carry `invocation_id`; reports carry the exact publication
(`listing_id`, `service_code`, `version`) and a category. A staff decision records who, when and
why; an approved dispute keeps a refund schedule (`refund_next_attempt_at`) until the ledger
refund has posted, and only then becomes REFUNDED.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime

KINDS_SQL = "'DISPUTE', 'CONTENT_REPORT'"
STATES_SQL = "'OPEN', 'APPROVED', 'REFUNDED', 'DENIED', 'UPHELD', 'DISMISSED'"
CATEGORIES_SQL = "'ILLEGAL', 'INFRINGEMENT', 'MISLEADING', 'MALICIOUS', 'OTHER'"
OPEN_DISPUTE_SQL = "kind = 'DISPUTE' AND state IN ('OPEN', 'APPROVED')"


class Case(Base):
    __tablename__ = "cases"
    __table_args__ = (
        UniqueConstraint("account_id", "idempotency_key", name="uq_cases_account_id"),
        Index("ix_cases_account_id_id", "account_id", "id"),
        Index(
            "uq_cases_open_dispute_invocation_id",
            "invocation_id",
            unique=True,
            sqlite_where=text(OPEN_DISPUTE_SQL),
            postgresql_where=text(OPEN_DISPUTE_SQL),
        ),
        Index("ix_cases_state_refund_next_attempt_at", "state", "refund_next_attempt_at"),
        CheckConstraint(f"kind IN ({KINDS_SQL})", name="kind"),
        CheckConstraint(f"state IN ({STATES_SQL})", name="state"),
        CheckConstraint(
            "(kind = 'DISPUTE' AND state IN ('OPEN', 'APPROVED', 'REFUNDED', 'DENIED') "
            "AND invocation_id IS NOT NULL AND listing_id IS NULL AND category IS NULL) OR "
            "(kind = 'CONTENT_REPORT' AND state IN ('OPEN', 'UPHELD', 'DISMISSED') "
            "AND invocation_id IS NULL AND listing_id IS NOT NULL AND category IS NOT NULL)",
            name="kind_shape",
        ),
        CheckConstraint(f"category IS NULL OR category IN ({CATEGORIES_SQL})", name="category"),
        CheckConstraint(
            "(state = 'OPEN') = (decided_at IS NULL) "
            "AND (decided_at IS NULL) = (decided_by IS NULL) "
            "AND (decided_at IS NULL) = (decision_reason IS NULL)",
            name="decision_evidence",
        ),
        CheckConstraint("(state = 'REFUNDED') = (refunded_at IS NOT NULL)", name="refunded_at"),
        CheckConstraint("(state = 'UPHELD') = (hold_id IS NOT NULL)", name="hold"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    account_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"))
    idempotency_key: Mapped[str] = mapped_column(String(191))
    fingerprint: Mapped[str] = mapped_column(String(64))
    statement: Mapped[str] = mapped_column(Text)

    invocation_id: Mapped[str | None] = mapped_column(String(40), ForeignKey("invocations.id"))
    listing_id: Mapped[str | None] = mapped_column(String(40), ForeignKey("listings.id"))
    service_code: Mapped[str | None] = mapped_column(String(100))
    version: Mapped[str | None] = mapped_column(String(20))
    category: Mapped[str | None] = mapped_column(String(16))

    decided_by: Mapped[str | None] = mapped_column(String(100))
    decided_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    decision_reason: Mapped[str | None] = mapped_column(Text)

    refund_attempts: Mapped[int] = mapped_column(Integer)
    refund_next_attempt_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    refund_last_error: Mapped[str | None] = mapped_column(String(200))
    refunded_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    hold_id: Mapped[str | None] = mapped_column(String(40), ForeignKey("holds.id"))

    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
