"""What the ledger hands back: balances, reservation views and the verification report."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

PLATFORM = "platform"
"""The owner of the platform's ledger accounts (revenue, issuance)."""


class AccountKind(StrEnum):
    AVAILABLE = "available"
    RESERVED = "reserved"
    EARNINGS = "earnings"
    REVENUE = "revenue"
    ISSUANCE = "issuance"


class TransferKind(StrEnum):
    GRANT = "grant"
    RESERVE = "reserve"
    SETTLE = "settle"
    RELEASE = "release"
    REFUND = "refund"
    PAYOUT = "payout"


class ReservationState(StrEnum):
    HELD = "HELD"
    SETTLED = "SETTLED"
    RELEASED = "RELEASED"
    REFUNDED = "REFUNDED"


@dataclass(frozen=True)
class Balances:
    """One account's points: spendable, held for pending calls, earned as a provider."""

    available: int
    reserved: int
    earnings: int


@dataclass(frozen=True)
class ReservationInfo:
    id: str
    account_id: str
    reference: str
    amount: int
    state: ReservationState
    provider_account_id: str | None
    provider_amount: int | None
    platform_amount: int | None
    created_at: dt.datetime
    resolved_at: dt.datetime | None
    refunded_at: dt.datetime | None


@dataclass
class LedgerReport:
    """The outcome of `verify`: `balanced` is true only when `problems` is empty."""

    problems: list[str] = field(default_factory=list)
    issued: int = 0
    available: int = 0
    reserved: int = 0
    earnings: int = 0
    revenue: int = 0

    @property
    def balanced(self) -> bool:
        return not self.problems

    @property
    def circulating(self) -> int:
        """Points held by anyone: must equal `issued`."""
        return self.available + self.reserved + self.earnings + self.revenue

    def take_totals(self, totals: Mapping[str, int], *, held: int = 0) -> None:
        """Set the figures from the balances summed per account kind (`held`: the points of
        reservations counted outside any ledger account), and note a circulation that differs
        from issuance."""
        self.issued = -totals.get(AccountKind.ISSUANCE, 0)
        self.available = totals.get(AccountKind.AVAILABLE, 0)
        self.reserved = held + totals.get(AccountKind.RESERVED, 0)
        self.earnings = totals.get(AccountKind.EARNINGS, 0)
        self.revenue = totals.get(AccountKind.REVENUE, 0)
        if self.circulating != self.issued:
            self.problems.append(
                f"points in circulation ({self.circulating}) differ from points issued "
                f"({self.issued})"
            )

    def as_dict(self) -> dict[str, Any]:
        return {"balanced": self.balanced, **asdict(self), "circulating": self.circulating}
