"""Ledger tables — design overview.

- `LedgerAccount`: one per (owner, kind) (a caller's `reserved` is no longer a row: it is the
  sum of the caller's HELD reservations). Owners are account ids, or `platform` for the
  platform's `revenue` and `issuance`. `balance` is a cache of the sum of its entries; the
  database refuses a negative balance for every kind but `issuance`, the source of granted
  points, which goes negative by exactly the points issued.
- `LedgerTransfer`: one movement of points (grant, reserve, settle, release, refund, payout).
- `LedgerEntry`: one leg of a transfer, a signed amount on one ledger account (positive raises
  the balance). The legs of a transfer sum to zero. Transfers and entries are append-only:
  database triggers refuse UPDATE and DELETE.
- `Reservation`: one pending transfer, the points held for one call (`reference` = the
  invocation id): created HELD with the debit of the caller's available points, it resolves
  once, HELD → SETTLED (posted: its split credits the provider's earnings and platform revenue,
  appended here and folded into their balances later) | RELEASED (voided: the points go back
  to available); a settled one may later become REFUNDED (a `refund` transfer). A trigger
  refuses any other change (decision 0595).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from mercato.db.base import Base, UTCDateTime

# The CHECKs spell a list as comparisons, not `x IN (…)`: SQLite builds an ephemeral index for
# an IN list of three or more constants on every row it checks (migration 0016, decision 0493).
ACCOUNT_KINDS_SQL = (
    "kind = 'available' OR kind = 'reserved' OR kind = 'earnings' OR kind = 'revenue' "
    "OR kind = 'issuance'"
)
TRANSFER_KINDS_SQL = (
    "kind = 'grant' OR kind = 'reserve' OR kind = 'settle' OR kind = 'release' "
    "OR kind = 'refund' OR kind = 'payout'"
)
RESERVATION_STATES_SQL = (
    "state = 'HELD' OR state = 'SETTLED' OR state = 'RELEASED' OR state = 'REFUNDED'"
)


class LedgerAccount(Base):
    __tablename__ = "ledger_accounts"
    __table_args__ = (
        UniqueConstraint("owner", "kind"),
        CheckConstraint(ACCOUNT_KINDS_SQL, name="kind"),
        CheckConstraint("kind = 'issuance' OR balance >= 0", name="balance_non_negative"),
        CheckConstraint(
            "(owner = 'platform' AND (kind = 'revenue' OR kind = 'issuance')) OR "
            "(owner <> 'platform' AND (kind = 'available' OR kind = 'reserved' "
            "OR kind = 'earnings'))",
            name="owner_kind",
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(16))
    balance: Mapped[int] = mapped_column(BigInteger, default=0)
    folded_through: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """`earnings` and `revenue`: the credit sequence number up to which the settled calls'
    credits are folded into `balance` (decision 0595); 0 for the other kinds."""


class LedgerTransfer(Base):
    __tablename__ = "ledger_transfers"
    __table_args__ = (CheckConstraint(TRANSFER_KINDS_SQL, name="kind"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    reference: Mapped[str | None] = mapped_column(String(100), index=True)
    memo: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class LedgerEntry(Base):
    __tablename__ = "ledger_entries"
    __table_args__ = (CheckConstraint("amount <> 0", name="amount_non_zero"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    transfer_id: Mapped[str] = mapped_column(ForeignKey("ledger_transfers.id"), index=True)
    ledger_account_id: Mapped[str] = mapped_column(ForeignKey("ledger_accounts.id"), index=True)
    amount: Mapped[int] = mapped_column(BigInteger)


class Reservation(Base):
    __tablename__ = "reservations"
    __table_args__ = (
        CheckConstraint("amount > 0", name="amount_positive"),
        CheckConstraint(RESERVATION_STATES_SQL, name="state"),
        CheckConstraint(
            "state = 'HELD' OR state = 'RELEASED' OR "
            "(provider_amount >= 0 AND platform_amount >= 0 "
            "AND provider_amount + platform_amount = amount)",
            name="split_adds_up",
        ),
        Index("ix_reservations_account_id_state", "account_id", "state"),
        # Migration 0022 also makes `ux_reservations_credit_seq`, unique on `credit_seq` where it
        # is set; not declared here: the guarded compiler reads the table's unique indexes as
        # whole-table keys.
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    reference: Mapped[str] = mapped_column(String(100), unique=True)
    amount: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    provider_account_id: Mapped[str | None] = mapped_column(ForeignKey("accounts.id"))
    provider_amount: Mapped[int | None] = mapped_column(BigInteger)
    platform_amount: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    resolved_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    refunded_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    credit_seq: Mapped[int | None] = mapped_column(BigInteger)
    """Set when the reservation settles: the order in which its credits (`provider_amount` to
    the provider's earnings, `platform_amount` to platform revenue) are folded (decision 0595)."""
