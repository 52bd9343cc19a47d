"""Every ledger line, for the pages that list movements (history, a provider's earnings).

A line is one leg of a movement: (line id, transfer id, transfer kind, reference, memo, time,
owner, account kind, amount). The transfers' entries are lines as they are; a reservation, one
pending transfer (decision 0595), stands for the legs it records: at `created_at` a `reserve`
(available −amount, reserved +amount) and, once resolved at `resolved_at`, a `settle`
(reserved −amount, the provider's earnings +provider_amount, platform revenue
+platform_amount; a leg of 0 is no line) or a `release` (reserved −amount, available +amount).
The lines of a reservation carry its id as their reference, as its refund's entries do.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Select, String, Subquery, Table, literal, select, union_all

from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.ledger.schemas import PLATFORM

_E = cast(Table, LedgerEntry.__table__)
_T = cast(Table, LedgerTransfer.__table__)
_A = cast(Table, LedgerAccount.__table__)
_R = cast(Table, Reservation.__table__)
_POSTED = (_R.c.state == "SETTLED") | (_R.c.state == "REFUNDED")


def _entries() -> Select[Any]:
    return (
        select(
            _E.c.id.label("line_id"),
            _T.c.id.label("transfer_id"),
            _T.c.kind.label("transfer_kind"),
            _T.c.reference.label("reference"),
            _T.c.memo.label("memo"),
            _T.c.created_at.label("created_at"),
            _A.c.owner.label("owner"),
            _A.c.kind.label("account_kind"),
            _E.c.amount.label("amount"),
        )
        .select_from(_E)
        .join(_T, _T.c.id == _E.c.transfer_id)
        .join(_A, _A.c.id == _E.c.ledger_account_id)
    )


def _leg(
    leg: str, kind: str, at: Any, owner: Any, account_kind: str, amount: Any, *where: Any
) -> Select[Any]:
    return select(
        (_R.c.id + literal(f":{leg}", String)).label("line_id"),
        (_R.c.id + literal(f":{kind}", String)).label("transfer_id"),
        literal(kind, String).label("transfer_kind"),
        _R.c.id.label("reference"),
        _R.c.reference.label("memo"),
        at.label("created_at"),
        owner.label("owner"),
        literal(account_kind, String).label("account_kind"),
        amount.label("amount"),
    ).where(*where)


def lines() -> Subquery:
    """All ledger lines, as a subquery (filter it by `owner`, `account_kind`, …)."""
    r = _R.c
    released = r.state == "RELEASED"
    platform = literal(PLATFORM, String)
    return union_all(
        _entries(),
        _leg("ra", "reserve", r.created_at, r.account_id, "available", -r.amount),
        _leg("rr", "reserve", r.created_at, r.account_id, "reserved", r.amount),
        _leg("sr", "settle", r.resolved_at, r.account_id, "reserved", -r.amount, _POSTED),
        _leg(
            "se",
            "settle",
            r.resolved_at,
            r.provider_account_id,
            "earnings",
            r.provider_amount,
            _POSTED,
            r.provider_amount != 0,
        ),
        _leg(
            "sp",
            "settle",
            r.resolved_at,
            platform,
            "revenue",
            r.platform_amount,
            _POSTED,
            r.platform_amount != 0,
        ),
        _leg("lr", "release", r.resolved_at, r.account_id, "reserved", -r.amount, released),
        _leg("la", "release", r.resolved_at, r.account_id, "available", r.amount, released),
    ).subquery("ledger_lines")
