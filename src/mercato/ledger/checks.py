"""The ledger's invariants, re-proven from the entries (`mercato admin verify-ledger`)."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.ledger.schemas import AccountKind, LedgerReport, ReservationState

_LIMIT = 50
"""Report at most this many problems of one kind; the rest are counted."""


def run_checks(session: Session) -> LedgerReport:
    """Check every invariant and total the balances by kind."""
    report = LedgerReport()
    _transfers_balance(session, report)
    _cached_balances_match(session, report)
    _totals_and_signs(session, report)
    _reserved_matches_holds(session, report)
    _settled_splits(session, report)
    return report


def _add(report: LedgerReport, problems: list[str]) -> None:
    report.problems.extend(problems[:_LIMIT])
    if len(problems) > _LIMIT:
        report.problems.append(f"... and {len(problems) - _LIMIT} more like the above")


def _transfers_balance(session: Session, report: LedgerReport) -> None:
    rows = session.execute(
        select(
            LedgerTransfer.id,
            func.count(LedgerEntry.id),
            func.coalesce(func.sum(LedgerEntry.amount), 0),
        )
        .outerjoin(LedgerEntry, LedgerEntry.transfer_id == LedgerTransfer.id)
        .group_by(LedgerTransfer.id)
        .having(
            (func.count(LedgerEntry.id) < 2) | (func.coalesce(func.sum(LedgerEntry.amount), 0) != 0)
        )
        .order_by(LedgerTransfer.id)
    ).all()
    _add(
        report,
        [f"transfer {tid} has {count} entries summing to {total}" for tid, count, total in rows],
    )


def _cached_balances_match(session: Session, report: LedgerReport) -> None:
    entry_sum = func.coalesce(func.sum(LedgerEntry.amount), 0)
    rows = session.execute(
        select(
            LedgerAccount.id,
            LedgerAccount.owner,
            LedgerAccount.kind,
            LedgerAccount.balance,
            entry_sum,
        )
        .outerjoin(LedgerEntry, LedgerEntry.ledger_account_id == LedgerAccount.id)
        .group_by(LedgerAccount.id, LedgerAccount.owner, LedgerAccount.kind, LedgerAccount.balance)
        .having(LedgerAccount.balance != entry_sum)
        .order_by(LedgerAccount.id)
    ).all()
    _add(
        report,
        [
            f"ledger account {lid} ({owner} {kind}) caches {cached} but its entries sum to {total}"
            for lid, owner, kind, cached, total in rows
        ],
    )


def _totals_and_signs(session: Session, report: LedgerReport) -> None:
    rows = session.execute(
        select(LedgerAccount.id, LedgerAccount.owner, LedgerAccount.kind, LedgerAccount.balance)
    ).all()
    totals: dict[str, int] = defaultdict(int)
    wrong_sign = []
    for lid, owner, kind, balance in rows:
        totals[kind] += balance
        if (kind == AccountKind.ISSUANCE and balance > 0) or (
            kind != AccountKind.ISSUANCE and balance < 0
        ):
            wrong_sign.append(f"ledger account {lid} ({owner} {kind}) has balance {balance}")
    _add(report, wrong_sign)
    report.issued = -totals[AccountKind.ISSUANCE]
    report.available = totals[AccountKind.AVAILABLE]
    report.reserved = totals[AccountKind.RESERVED]
    report.earnings = totals[AccountKind.EARNINGS]
    report.revenue = totals[AccountKind.REVENUE]
    if report.circulating != report.issued:
        report.problems.append(
            f"points in circulation ({report.circulating}) differ from points issued "
            f"({report.issued})"
        )


def _reserved_matches_holds(session: Session, report: LedgerReport) -> None:
    held: dict[str, int] = {
        owner: int(total)
        for owner, total in session.execute(
            select(Reservation.account_id, func.sum(Reservation.amount))
            .where(Reservation.state == ReservationState.HELD.value)
            .group_by(Reservation.account_id)
        ).tuples()
    }
    reserved: dict[str, int] = {
        owner: balance
        for owner, balance in session.execute(
            select(LedgerAccount.owner, LedgerAccount.balance).where(
                LedgerAccount.kind == AccountKind.RESERVED.value
            )
        ).tuples()
    }
    _add(
        report,
        [
            f"account {owner} has {reserved.get(owner, 0)} reserved but holds "
            f"{held.get(owner, 0)} in open reservations"
            for owner in sorted(set(held) | set(reserved))
            if reserved.get(owner, 0) != held.get(owner, 0)
        ],
    )


def _settled_splits(session: Session, report: LedgerReport) -> None:
    rows = session.execute(
        select(
            Reservation.id,
            Reservation.state,
            Reservation.amount,
            Reservation.provider_amount,
            Reservation.platform_amount,
        )
        .where(
            Reservation.state.in_([ReservationState.SETTLED.value, ReservationState.REFUNDED.value])
        )
        .where(
            (Reservation.provider_amount.is_(None))
            | (Reservation.platform_amount.is_(None))
            | (Reservation.provider_amount + Reservation.platform_amount != Reservation.amount)
        )
    ).all()
    _add(
        report,
        [
            f"reservation {rid} ({state}) of {amount} splits into {prov} + {plat}"
            for rid, state, amount, prov, plat in rows
        ],
    )
