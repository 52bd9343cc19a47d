"""The invocation row: one call intent from acceptance to its single terminal settlement."""

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
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime


class Invocation(Base):
    """State machine in `state` (see docs/invocation-lifecycle.md); money in `settlement`."""

    __tablename__ = "invocations"
    __table_args__ = (
        UniqueConstraint("account_id", "idempotency_key", name="uq_invocations_account_id"),
        # Partial, so that the Idempotency-Key lookup can only use the unique key above
        # (migration 0014, decision 0371); the receipts listing states the predicate.
        Index(
            "ix_invocations_account_id_id",
            "account_id",
            "id",
            postgresql_where=text("id IS NOT NULL"),
            sqlite_where=text("id IS NOT NULL"),
        ),
        # A version's last calls, for its provider's page (migration 0020, decision 0556).
        Index("ix_invocations_version_id_created_at", "version_id", "created_at"),
        # No index names `state`, `next_attempt_at` or anything else a settle changes, so that
        # the terminal update is a HOT update on PostgreSQL: the worker finds the calls that are
        # not terminal through `invocation_dues` (migration 0023, decision 0602).
        # Comparisons, not `x IN (…)`: SQLite builds an ephemeral index for an IN list of three
        # or more constants on every row it checks (migration 0016, decision 0493).
        CheckConstraint(
            "state = 'DISPATCHING' OR state = 'RETRY_WAIT' OR state = 'RECONCILING' "
            "OR state = 'SUCCEEDED' OR state = 'FAILED'",
            name="state",
        ),
        CheckConstraint(
            "settlement = 'PENDING' OR settlement = 'SETTLED' OR settlement = 'RELEASED' "
            "OR settlement = 'REFUNDED'",
            name="settlement",
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(40), ForeignKey("accounts.id"))
    idempotency_key: Mapped[str] = mapped_column(String(191))
    fingerprint: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(16))
    # The id of the request that accepted the call (None: accepted outside one, or before
    # migration 0013); the worker's log lines about the call carry it (decision 0276).
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The API key that made the call (None: a session's call, or before migration 0021).
    api_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)

    service_code: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(32))
    version_id: Mapped[str] = mapped_column(String(40))
    contract_digest: Mapped[str] = mapped_column(String(64))
    connection_id: Mapped[str] = mapped_column(String(40))
    provider_account_id: Mapped[str] = mapped_column(String(40))
    provider_share_bps: Mapped[int] = mapped_column(Integer)
    price: Mapped[int] = mapped_column(Integer)
    has_artifact_contract: Mapped[bool] = mapped_column(Boolean)
    response_max_bytes: Mapped[int] = mapped_column(Integer)
    result_schema: Mapped[dict[str, Any]] = mapped_column(JSON)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    provider_key: Mapped[str] = mapped_column(String(120))

    state: Mapped[str] = mapped_column(String(16))
    settlement: Mapped[str] = mapped_column(String(16))
    reservation_id: Mapped[str] = mapped_column(String(40))
    sends: Mapped[int] = mapped_column(Integer)
    reconciliations: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(40), nullable=True)
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Set when the call is marked stuck (decision 0201); the row stays in its active state.
    stuck_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # A staff resolution (decision 0202): the decision, why, by whom (never on a receipt), when.
    resolution_decision: Mapped[str | None] = mapped_column(String(16), nullable=True)
    resolution_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    resolved_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    resolved_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)

    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    provider_http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    result: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    artifacts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)

    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    settled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    refunded_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class InvocationDue(Base):
    """A call that is not terminal yet (DISPATCHING, RETRY_WAIT or RECONCILING): the worker's
    queue. Kept by triggers on `invocations` (migration 0023), never written by the code."""

    __tablename__ = "invocation_dues"

    invocation_id: Mapped[str] = mapped_column(String(40), primary_key=True)


class InvocationAttempt(Base):
    """One send of an invocation: the address and connection revision that received it.

    Written before the send, in the transaction that counts it, so a crash mid-send still
    knows where to reconcile. `credential_digest` is an HMAC of the credential sent (never the
    credential): reconciliation may ask this address only with that same credential (0200).
    """

    __tablename__ = "invocation_attempts"

    invocation_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("invocations.id"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    connection_revision: Mapped[int] = mapped_column(Integer)
    base_url: Mapped[str] = mapped_column(String(2048))
    credential_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    sent_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
