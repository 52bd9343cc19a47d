"""Read-only queries the pages need that no domain service offers as a list."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import case, func, inspect, select
from sqlalchemy.orm import Session

from mercato.accounts.models import Account
from mercato.catalog.models import Hold, Listing, Version
from mercato.invocations.models import Invocation
from mercato.invocations.schemas import public_status
from mercato.ledger.lines import lines
from mercato.providers.models import ProviderConnection


def plain(row: Any) -> SimpleNamespace:
    """A detached copy of an ORM row's columns, safe to render after the session closed."""
    return SimpleNamespace(**{c.key: getattr(row, c.key) for c in inspect(row).mapper.column_attrs})


_SHOWN_KINDS = ("available", "reserved", "earnings")


@dataclass(frozen=True)
class LedgerLine:
    at: dt.datetime
    kind: str  # grant, reserve, settle, release, refund, payout
    balance: str  # available, reserved, earnings
    amount: int
    memo: str


def connections_of(session: Session, *, owner_id: str | None) -> list[ProviderConnection]:
    """Connections, newest first; `owner_id=None` lists everyone's (staff)."""
    query = select(ProviderConnection).order_by(ProviderConnection.created_at.desc())
    if owner_id is not None:
        query = query.where(ProviderConnection.owner_id == owner_id)
    return list(session.scalars(query))


def listings_of(session: Session, *, owner_id: str) -> list[Listing]:
    query = select(Listing).where(Listing.owner_id == owner_id).order_by(Listing.service_code)
    return list(session.scalars(query))


def versions_of(session: Session, *, listing_id: str) -> list[Version]:
    query = select(Version).where(Version.listing_id == listing_id).order_by(Version.number)
    return list(session.scalars(query))


def version(session: Session, *, version_id: str) -> tuple[Listing, Version] | None:
    row = session.execute(
        select(Listing, Version)
        .join(Version, Version.listing_id == Listing.id)
        .where(Version.id == version_id)
    ).first()
    return None if row is None else (row[0], row[1])


def all_listings(session: Session) -> list[Listing]:
    return list(session.scalars(select(Listing).order_by(Listing.service_code)))


def active_holds(session: Session) -> list[tuple[Hold, str]]:
    rows = session.execute(
        select(Hold, Listing.service_code)
        .join(Listing, Listing.id == Hold.listing_id)
        .where(Hold.released_at.is_(None))
        .order_by(Hold.created_at.desc())
    ).all()
    return [(row[0], row[1]) for row in rows]


def emails(session: Session, account_ids: set[str]) -> dict[str, str]:
    if not account_ids:
        return {}
    rows = session.execute(select(Account.id, Account.email).where(Account.id.in_(account_ids)))
    return {row[0]: row[1] for row in rows}


@dataclass(frozen=True)
class EarningLine:
    at: dt.datetime
    kind: str  # settle (a call paid you) or refund (a disputed call was paid back)
    amount: int
    invocation_id: str


def version_earnings(
    session: Session, *, version_id: str, provider_id: str, limit: int = 50
) -> list[EarningLine]:
    """The provider's earnings ledger lines from calls of one version, newest first."""
    line = lines()
    rows = session.execute(
        select(line.c.created_at, line.c.transfer_kind, line.c.amount, Invocation.id)
        .join(Invocation, Invocation.reservation_id == line.c.reference)
        .where(
            line.c.owner == provider_id,
            line.c.account_kind == "earnings",
            Invocation.version_id == version_id,
        )
        .order_by(line.c.created_at.desc(), line.c.line_id.desc())
        .limit(limit)
    ).all()
    return [EarningLine(*row) for row in rows]


RECENT_CALLS = 100


@dataclass(frozen=True)
class OutcomeCount:
    outcome: str  # SUCCEEDED, PENDING or FAILED
    error_code: str | None  # a failure's code: the platform's, or the provider's own
    defined: bool  # the provider answered this failure (its errorCode), not the platform
    calls: int


def version_outcomes(
    session: Session, *, version_id: str, limit: int = RECENT_CALLS
) -> list[OutcomeCount]:
    """How a version's last `limit` calls ended, counted by outcome and error code.

    Only counts: never who called or what was sent (decision 0556).
    """
    recent = (
        select(
            Invocation.state,
            Invocation.error_code,
            Invocation.provider_http_status.is_not(None).label("defined"),
        )
        .where(Invocation.version_id == version_id)
        .order_by(Invocation.created_at.desc(), Invocation.id.desc())
        .limit(limit)
        .subquery()
    )
    rows = session.execute(
        select(recent.c.state, recent.c.error_code, recent.c.defined, func.count()).group_by(
            recent.c.state, recent.c.error_code, recent.c.defined
        )
    ).all()
    counts: dict[tuple[str, str | None, bool], int] = {}
    for state, error_code, defined, calls in rows:
        outcome = public_status(state)
        key = (outcome, error_code if outcome == "FAILED" else None, bool(defined))
        counts[key] = counts.get(key, 0) + int(calls)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1] or ""))
    return [OutcomeCount(o, code, defined, calls) for (o, code, defined), calls in ordered]


def review_queue(session: Session) -> list[tuple[Listing, Version]]:
    """Versions waiting for staff: submitted or approved, oldest change first."""
    rows = session.execute(
        select(Listing, Version)
        .join(Version, Version.listing_id == Listing.id)
        .where(Version.state.in_(("SUBMITTED", "APPROVED")))
        .order_by(Version.updated_at)
    ).all()
    return [(row[0], row[1]) for row in rows]


def version_earned(session: Session, *, version_id: str, provider_id: str) -> int:
    """The provider's net earnings from calls of one version (settlements less refunds)."""
    line = lines()
    total = session.scalar(
        select(func.coalesce(func.sum(line.c.amount), 0))
        .join(Invocation, Invocation.reservation_id == line.c.reference)
        .where(
            line.c.owner == provider_id,
            line.c.account_kind == "earnings",
            Invocation.version_id == version_id,
        )
    )
    return int(total or 0)


@dataclass(frozen=True)
class HistoryItem:
    """One line of the account's history: a call (its reserve, settle, release and refund
    together), a grant, or a movement of earnings; `entries` are its ledger lines."""

    at: dt.datetime
    kind: str  # call, grant, earnings, other
    change: int  # what it did to the points available to spend
    invocation_id: str | None
    service_code: str | None
    version: str | None
    settlement: str | None
    memo: str
    entries: list[LedgerLine]


_CALL_KINDS = ("reserve", "settle", "release", "refund")


def call_history(session: Session, *, account_id: str, limit: int = 50) -> list[HistoryItem]:
    """The account's history, one line per call, newest first (decision 0562): the caller's
    legs of one call share the reservation as their reference; each other transfer is a line
    of its own. The platform's own legs are not shown."""
    line = lines()
    mine = (line.c.owner == account_id) & line.c.account_kind.in_(_SHOWN_KINDS)
    key = case(
        (
            (line.c.transfer_kind.in_(_CALL_KINDS)) & (line.c.account_kind != "earnings"),
            func.coalesce(line.c.reference, line.c.transfer_id),
        ),
        else_=line.c.transfer_id,
    ).label("item")
    base = (
        select(key, func.max(line.c.created_at).label("last"))
        .where(mine)
        .group_by(key)
        .order_by(func.max(line.c.created_at).desc(), key.desc())
        .limit(limit)
    )
    keys = [row[0] for row in session.execute(base)]
    if not keys:
        return []
    rows = session.execute(
        select(
            key,
            line.c.created_at,
            line.c.transfer_kind,
            line.c.account_kind,
            line.c.amount,
            line.c.memo,
        )
        .where(mine, key.in_(keys))
        .order_by(line.c.created_at, line.c.line_id)
    ).all()
    grouped: dict[str, list[LedgerLine]] = {k: [] for k in keys}
    for item, *entry in rows:
        grouped[item].append(LedgerLine(*entry))
    calls = {
        row.reservation_id: row
        for row in session.execute(
            select(
                Invocation.reservation_id,
                Invocation.id,
                Invocation.service_code,
                Invocation.version,
                Invocation.settlement,
            ).where(Invocation.account_id == account_id, Invocation.reservation_id.in_(keys))
        )
    }
    return [_item(grouped[k], calls.get(k)) for k in keys if grouped[k]]


def _item(entries: list[LedgerLine], call: Any) -> HistoryItem:
    change = sum(e.amount for e in entries if e.balance == "available")
    first, last = entries[0], entries[-1]
    if call is not None:
        kind = "call"
    elif first.kind == "grant":
        kind = "grant"
    elif all(e.balance == "earnings" for e in entries):
        kind = "earnings"
    else:
        kind = "other"
    return HistoryItem(
        at=last.at,
        kind=kind,
        change=change,
        invocation_id=None if call is None else call.id,
        service_code=None if call is None else call.service_code,
        version=None if call is None else call.version,
        settlement=None if call is None else call.settlement,
        memo=first.memo,
        entries=list(reversed(entries)),
    )
