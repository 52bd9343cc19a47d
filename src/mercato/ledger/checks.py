"""The ledger's invariants, re-proven from the entries (`mercato admin verify-ledger`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.ledger.schemas import PLATFORM, AccountKind, LedgerReport, ReservationState

_LIMIT = 50
"""Report at most this many problems of one kind; the rest are counted."""


def run_checks(session: Session) -> LedgerReport:
    """Check every invariant and total the balances by kind."""
    report = LedgerReport()
    _transfers_balance(session, report)
    _cached_balances_match(session, report)
    _totals_and_signs(session, report)
    _credits_numbered(session, report)
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


def _grouped(session: Session, statement: Any) -> dict[str, int]:
    return {str(key): int(total or 0) for key, total in session.execute(statement).tuples()}


_RESERVATIONS = cast(Table, Reservation.__table__)
_A = cast(Table, LedgerAccount.__table__).c
_R = _RESERVATIONS.c
_EARNINGS = AccountKind.EARNINGS.value
_REVENUE = AccountKind.REVENUE.value


def _cached_balances_match(session: Session, report: LedgerReport) -> None:
    """Each cached balance equals its entries plus what the reservations (pending transfers
    and their resolutions, decision 0595) moved into it: a caller's available is lowered by
    every reservation not released; a provider's earnings and platform revenue hold the
    credits of the settled calls numbered up to their watermark (the rest are not folded yet)."""
    entries = _grouped(
        session,
        select(LedgerEntry.ledger_account_id, func.sum(LedgerEntry.amount)).group_by(
            LedgerEntry.ledger_account_id
        ),
    )
    held = _grouped(
        session,
        select(_R.account_id, func.sum(_R.amount))
        .where(_R.state != ReservationState.RELEASED.value)
        .group_by(_R.account_id),
    )
    earned = _grouped(
        session,
        select(_A.id, func.sum(_R.provider_amount))
        .join(
            _RESERVATIONS,
            (_R.provider_account_id == _A.owner) & (_R.credit_seq <= _A.folded_through),
        )
        .where(_A.kind == _EARNINGS)
        .group_by(_A.id),
    )
    platform = _grouped(
        session,
        select(_A.id, func.sum(_R.platform_amount))
        .join(_RESERVATIONS, _R.credit_seq <= _A.folded_through)
        .where(_A.kind == _REVENUE)
        .group_by(_A.id),
    )
    problems = []
    for lid, owner, kind, cached in session.execute(
        select(_A.id, _A.owner, _A.kind, _A.balance).order_by(_A.id)
    ).tuples():
        expected = entries.get(lid, 0)
        if kind == AccountKind.AVAILABLE.value:
            expected -= held.get(owner, 0)
        expected += earned.get(lid, 0) + platform.get(lid, 0)
        if cached != expected:
            problems.append(
                f"ledger account {lid} ({owner} {kind}) caches {cached} but its entries and "
                f"reservations sum to {expected}"
            )
    _add(report, problems)


def _unfolded(session: Session) -> tuple[dict[str, int], int]:
    """The credits not folded yet: per provider, and platform revenue's."""
    earnings = LedgerAccount.__table__.alias("earnings")
    per_provider = _grouped(
        session,
        select(_R.provider_account_id, func.sum(_R.provider_amount))
        .outerjoin(
            earnings,
            (earnings.c.owner == _R.provider_account_id) & (earnings.c.kind == _EARNINGS),
        )
        .where(_R.credit_seq > func.coalesce(earnings.c.folded_through, 0))
        .group_by(_R.provider_account_id),
    )
    through = session.execute(
        select(_A.folded_through).where(_A.owner == PLATFORM, _A.kind == _REVENUE)
    ).scalar()
    revenue = session.execute(
        select(func.coalesce(func.sum(_R.platform_amount), 0)).where(
            _R.credit_seq > int(through or 0)
        )
    ).scalar()
    return per_provider, int(revenue or 0)


def _totals_and_signs(session: Session, report: LedgerReport) -> None:
    """Totals by kind and signs, of the exact balances: earnings and revenue with the credits
    not folded yet, reserved as the sum of the HELD reservations."""
    per_provider, revenue_unfolded = _unfolded(session)
    rows = session.execute(select(_A.id, _A.owner, _A.kind, _A.balance)).all()
    totals: dict[str, int] = defaultdict(int)
    wrong_sign = []
    seen_earnings = set()
    for lid, owner, kind, balance in rows:
        if kind == _EARNINGS:
            balance += per_provider.get(owner, 0)
            seen_earnings.add(owner)
        elif kind == _REVENUE:
            balance += revenue_unfolded
            revenue_unfolded = 0
        totals[kind] += balance
        if (kind == AccountKind.ISSUANCE and balance > 0) or (
            kind != AccountKind.ISSUANCE and balance < 0
        ):
            wrong_sign.append(f"ledger account {lid} ({owner} {kind}) has balance {balance}")
    for owner, points in sorted(per_provider.items()):
        if owner not in seen_earnings:  # earned, nothing folded yet: no ledger account yet
            totals[_EARNINGS] += points
    totals[_REVENUE] += revenue_unfolded
    _add(report, wrong_sign)
    held = session.execute(
        select(func.coalesce(func.sum(_R.amount), 0)).where(_R.state == ReservationState.HELD.value)
    ).scalar()
    report.take_totals(totals, held=int(held or 0))


def _credits_numbered(session: Session, report: LedgerReport) -> None:
    """A settled (or refunded) reservation has its credits numbered; a held or released one
    has none."""
    posted = (_R.state == ReservationState.SETTLED.value) | (
        _R.state == ReservationState.REFUNDED.value
    )
    rows = session.execute(
        select(_R.id, _R.state)
        .where((posted & _R.credit_seq.is_(None)) | (~posted & _R.credit_seq.is_not(None)))
        .order_by(_R.id)
    ).all()
    _add(
        report, [f"reservation {rid} ({state}) has its credits misnumbered" for rid, state in rows]
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
