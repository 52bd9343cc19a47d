"""The ledger's money rules, each written once as guarded Core statements (`mercato.db.guarded`).

Each builder returns the steps of one rule; the inputs are expressions (`param`, `col`), so
the same rule runs standalone (`service.reserve`, `service.settle`, …) and inside the
invocation engine's accept and settle programs, on SQLite statement by statement and on
PostgreSQL as one data-modifying CTE.

A transfer (`transfer_steps`) is, in this order:

1. PostgreSQL only: lock the legs' existing ledger accounts in id order (`SELECT … ORDER BY id
   FOR NO KEY UPDATE`), so two transfers never deadlock and the entries other transfers append
   (KEY SHARE) do not wait (decision 0186). SQLite's BEGIN IMMEDIATE already serialises.
2. One statement per leg, moving its balance:
   - a guarded debit (every kind but `issuance`) is conditional:
     `UPDATE ledger_accounts SET balance = balance - :n WHERE owner … AND kind … AND
     balance >= :n RETURNING id`; no row is a refusal (code of the leg, detail: the balance
     and the points wanted);
   - a credit, or a debit of `issuance`, is an upsert that creates the account when missing:
     `INSERT … ON CONFLICT (owner, kind) DO UPDATE SET balance = balance + excluded.balance`.
   A leg of zero points (a 0 % or 100 % provider share) moves nothing and has no entry.
3. The transfer row, then its entries (one per moved leg, with the account ids the moves
   returned).

A call's points are one pending transfer (decision 0595): `reserve_steps` debits the caller's
available and inserts the reservation (`moves`, no transfer row); `settle_steps` posts it in one
UPDATE that records the split and numbers its credits, which `service.fold` adds to the
provider's earnings and platform revenue later; `release_steps` voids it (the points back to
available). Refunds, grants and payouts are transfers.

The append-only triggers, the deferred balanced-transfer check (PostgreSQL), the reservation
trigger (a resolution happens once) and the CHECKs (non-negative balances, the settled split)
still hold everything these statements write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, String, Table, and_, func, or_, select, union_all

from mercato.db.base import UTCDateTime
from mercato.db.guarded import (
    Empty,
    Expr,
    Refs,
    Step,
    const,
    inline,
    insert_rows,
    insert_select,
    update_where,
)
from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
from mercato.ledger.schemas import PLATFORM, AccountKind, ReservationState, TransferKind

ACCOUNTS = cast(Table, LedgerAccount.__table__)
TRANSFERS = cast(Table, LedgerTransfer.__table__)
ENTRIES = cast(Table, LedgerEntry.__table__)
RESERVATIONS = cast(Table, Reservation.__table__)

# Refusal codes (`guarded.Refused.code`) and what their detail holds.
SHORT = "short"  # a guarded debit found too little: (balance, points wanted)
RESOLVED = "resolved"  # the reservation is not HELD: (its state, or none when missing)
NOT_SETTLED = "not-settled"  # the reservation is not SETTLED: (its state, or none)
INVARIANT = "invariant"  # a reserved balance short of its reservation: (balance, wanted)
BLOCKED = "blocked"  # a refund debit found too little: (balance, points wanted)

_HELD = ReservationState.HELD.value


@dataclass(frozen=True)
class Leg:
    """One leg of a transfer: `points` (an expression, >= 0) to or from (owner, kind)."""

    owner: Expr
    kind: AccountKind
    debit: bool
    points: Expr
    refusal: str = SHORT  # the code when a guarded debit finds too little
    may_be_zero: bool = False

    @property
    def guarded(self) -> bool:
        return self.debit and self.kind is not AccountKind.ISSUANCE


def transfer_steps(
    prefix: str,
    *,
    kind: TransferKind,
    reference: Expr | None,
    memo: Expr,
    now: Expr,
    legs: Sequence[Leg],
) -> list[Step]:
    """The steps that post one transfer (see the module docstring). Its ids are fresh on each
    run: `<prefix>_transfer`, and per leg `<prefix>_entry<i>` and `<prefix>_account<i>` (the
    id the account gets should it not exist yet)."""
    steps = [Step(f"{prefix}_lock", _lock(legs), Empty.SKIP, only="postgresql")]
    for i, leg in enumerate(legs):
        name = f"{prefix}_leg{i}"
        if leg.guarded:
            steps.append(
                Step(
                    name,
                    _debit(leg),
                    Empty.REFUSE,
                    code=leg.refusal,
                    detail=_short_detail(leg),
                    required_if=_nonzero(leg.points) if leg.may_be_zero else None,
                )
            )
        else:
            account = ((f"{prefix}_account{i}", "lac"),)
            steps.append(Step(name, _upsert(prefix, i, leg), Empty.SKIP, fresh=account))
    transfer = ((f"{prefix}_transfer", "trf"),)
    entries = tuple((f"{prefix}_entry{i}", "ent") for i in range(len(legs)))
    steps.append(
        Step(f"{prefix}_transfer", _transfer(prefix, kind, reference, memo, now), fresh=transfer)
    )
    steps.append(Step(f"{prefix}_entries", _entries(prefix, legs), Empty.SKIP, fresh=entries))
    return steps


def _nonzero(points: Expr) -> Expr:
    return lambda refs: points(refs) != 0


def _account_is(refs: Refs, leg: Leg) -> Any:
    return and_(ACCOUNTS.c.owner == leg.owner(refs), ACCOUNTS.c.kind == inline(leg.kind.value))


def _lock(legs: Sequence[Leg]) -> Any:
    def build(refs: Refs) -> Any:
        return (
            select(ACCOUNTS.c.id)
            .where(or_(*[_account_is(refs, leg) for leg in legs]), refs.gate)
            .order_by(ACCOUNTS.c.id)
            .with_for_update(key_share=True, of=ACCOUNTS)
        )

    return build


def _debit(leg: Leg) -> Any:
    def build(refs: Refs) -> Any:
        points = leg.points(refs)
        guards = [points != 0] if leg.may_be_zero else []
        return update_where(
            ACCOUNTS,
            {"balance": ACCOUNTS.c.balance - points},
            _account_is(refs, leg),
            ACCOUNTS.c.balance >= points,
            refs.gate,
            *guards,
        ).returning(ACCOUNTS.c.id)

    return build


def _short_detail(leg: Leg) -> Any:
    def detail(refs: Refs) -> list[Any]:
        balance = (
            select(ACCOUNTS.c.balance)
            .where(_account_is(refs, leg))
            .with_for_update(key_share=True, of=ACCOUNTS)
            .scalar_subquery()
        )
        return [balance, leg.points(refs)]

    return detail


def _upsert(prefix: str, index: int, leg: Leg) -> Any:
    def build(refs: Refs) -> Any:
        points = leg.points(refs)
        amount = -points if leg.debit else points
        guards = [points != 0] if leg.may_be_zero else []
        values = {
            "id": refs.param(f"{prefix}_account{index}", String),
            "owner": leg.owner(refs),
            "kind": inline(leg.kind.value, String),
            "balance": amount,
        }
        write = insert_select(refs, ACCOUNTS, values, *guards)
        return write.on_conflict_do_update(
            index_elements=[ACCOUNTS.c.owner, ACCOUNTS.c.kind],
            set_={"balance": ACCOUNTS.c.balance + write.excluded.balance},
        ).returning(ACCOUNTS.c.id)

    return build


def _transfer(
    prefix: str, kind: TransferKind, reference: Expr | None, memo: Expr, now: Expr
) -> Any:
    def build(refs: Refs) -> Any:
        values = {
            "id": refs.param(f"{prefix}_transfer", String),
            "kind": inline(kind.value, String),
            "reference": inline(None) if reference is None else reference(refs),
            "memo": memo(refs),
            "created_at": now(refs),
        }
        return insert_select(refs, TRANSFERS, values).returning(TRANSFERS.c.id)

    return build


def _entries(prefix: str, legs: Sequence[Leg]) -> Any:
    def build(refs: Refs) -> Any:
        transfer_id = refs.col(f"{prefix}_transfer", "id")
        arms = []
        for i, leg in enumerate(legs):
            account_id = refs.col(f"{prefix}_leg{i}", "id")
            points = leg.points(refs)
            amount = -points if leg.debit else points
            guards = [points != 0] if leg.may_be_zero else []
            arms.append(
                select(
                    refs.param(f"{prefix}_entry{i}", String).label("id"),
                    transfer_id.label("transfer_id"),
                    account_id.label("ledger_account_id"),
                    cast(Any, amount).label("amount"),
                ).where(refs.gate, account_id.is_not(None), *guards)
            )
        columns = ["id", "transfer_id", "ledger_account_id", "amount"]
        return insert_rows(ENTRIES, columns, union_all(*arms)).returning(ENTRIES.c.id)

    return build


# --- the rules ------------------------------------------------------------------------------


def moves(prefix: str, legs: Sequence[Leg]) -> list[Step]:
    """Balance moves that are not a transfer of their own: the debit or credit of a caller's
    available points that a pending transfer (a reservation) records (decision 0595). One
    step per leg, as in `transfer_steps` (step `<prefix>_leg<i>`, account id
    `<prefix>_account<i>`); no transfer row and no entries."""
    steps = []
    for i, leg in enumerate(legs):
        name = f"{prefix}_leg{i}"
        if leg.guarded:
            steps.append(
                Step(name, _debit(leg), Empty.REFUSE, code=leg.refusal, detail=_short_detail(leg))
            )
        else:
            account = ((f"{prefix}_account{i}", "lac"),)
            steps.append(Step(name, _upsert(prefix, i, leg), Empty.SKIP, fresh=account))
    return steps


def reserve_steps(
    prefix: str, *, reservation_id: Expr, account_id: Expr, amount: Expr, reference: Expr, now: Expr
) -> list[Step]:
    """Hold `amount` of the account's available points for the call `reference`: the debit of
    the caller's available points (refused `SHORT` when available is short; first, so a refusal
    leaves nothing written before it, even on SQLite), then the reservation row that records
    it, one pending transfer (its unique reference refuses a second one). The caller's reserved
    points are the sum of its HELD reservations."""

    def hold(refs: Refs) -> Any:
        values = {
            "id": reservation_id(refs),
            "account_id": account_id(refs),
            "reference": reference(refs),
            "amount": amount(refs),
            "state": inline(_HELD, String),
            "created_at": now(refs),
        }
        return insert_select(refs, RESERVATIONS, values).returning(RESERVATIONS.c.id)

    return [
        *moves(prefix, [Leg(account_id, AccountKind.AVAILABLE, True, amount)]),
        Step(f"{prefix}_hold", hold),
    ]


def _state_detail(reservation_id: Expr) -> Any:
    def detail(refs: Refs) -> list[Any]:
        state = (
            select(RESERVATIONS.c.state)
            .where(RESERVATIONS.c.id == reservation_id(refs))
            .with_for_update(read=True, of=RESERVATIONS)
            .scalar_subquery()
        )
        return [state]

    return detail


def _resolve(
    name: str, reservation_id: Expr, expected: ReservationState, code: str, values: Any
) -> Step:
    """Move the reservation out of `expected`, once, and return what the transfer needs."""
    res = RESERVATIONS.c

    def build(refs: Refs) -> Any:
        return update_where(
            RESERVATIONS,
            values(refs),
            res.id == reservation_id(refs),
            res.state == inline(expected.value),
            refs.gate,
        ).returning(
            res.id,
            res.account_id,
            res.amount,
            res.reference,
            res.provider_account_id,
            res.provider_amount,
            res.platform_amount,
        )

    return Step(name, build, Empty.REFUSE, code=code, detail=_state_detail(reservation_id))


CREDIT_SEQUENCE = "ledger_credit_seq"
"""PostgreSQL: the sequence that numbers settled reservations' credits (migration 0022)."""


def _next_credit(refs: Refs) -> Any:
    """The settling reservation's credit number. PostgreSQL: the sequence; its numbers are
    handed out under the money lock held shared, so a fold that holds it exclusively sees every
    number below the highest committed (`service.fold`). SQLite: one more than the highest,
    under the writer lock BEGIN IMMEDIATE holds."""
    if refs.dialect == "postgresql":
        return func.nextval(inline(CREDIT_SEQUENCE))
    credits = RESERVATIONS.alias("credits")
    highest = func.coalesce(func.max(credits.c.credit_seq), 0) + 1
    # The WHERE lets SQLite read the maximum off the partial index of the credit numbers.
    return select(highest).where(credits.c.credit_seq.is_not(None)).scalar_subquery()


def settle_steps(
    prefix: str, *, reservation_id: Expr, provider_account_id: Expr, share_bps: Expr, now: Expr
) -> list[Step]:
    """Post a HELD reservation, once: one UPDATE that records the split (the provider's share,
    rounded down, and the rest to the platform; a CHECK holds them to the amount) and numbers
    its credits (`credit_seq`). The credits are folded into the provider's earnings and
    platform revenue later (`service.fold`); no balance row is written here, so no row is
    locked by every settle. Refused `RESOLVED` when the reservation is not HELD (or missing)."""
    res = RESERVATIONS.c
    name = f"{prefix}_settle"

    def values(refs: Refs) -> dict[str, Any]:
        provider_amount = res.amount * share_bps(refs) // inline(10_000, BigInteger)
        return {
            "state": inline(ReservationState.SETTLED.value, String),
            "provider_account_id": provider_account_id(refs),
            "provider_amount": provider_amount,
            "platform_amount": res.amount - provider_amount,
            "resolved_at": now(refs),
            "credit_seq": _next_credit(refs),
        }

    return [_resolve(name, reservation_id, ReservationState.HELD, RESOLVED, values)]


def release_steps(prefix: str, *, reservation_id: Expr, now: Expr) -> list[Step]:
    """Void a HELD reservation, once: its points back to the caller's available (refusals as
    `settle_steps`)."""
    name = f"{prefix}_release"

    def values(refs: Refs) -> dict[str, Any]:
        return {
            "state": inline(ReservationState.RELEASED.value, String),
            "resolved_at": now(refs),
        }

    row = _row(name)
    return [
        _resolve(name, reservation_id, ReservationState.HELD, RESOLVED, values),
        *moves(prefix, [Leg(row("account_id"), AccountKind.AVAILABLE, False, row("amount"))]),
    ]


def refund_steps(prefix: str, *, reservation_id: Expr, now: Expr) -> list[Step]:
    """Reverse both legs of a SETTLED reservation, once: the full gross amount back to the
    caller. Refused `NOT_SETTLED` when it is not SETTLED (or missing), `BLOCKED` when the
    provider's earnings or the platform's revenue hold too little."""
    name = f"{prefix}_refund"

    def values(refs: Refs) -> dict[str, Any]:
        return {
            "state": inline(ReservationState.REFUNDED.value, String),
            "refunded_at": now(refs),
        }

    row = _row(name)
    return [
        _resolve(name, reservation_id, ReservationState.SETTLED, NOT_SETTLED, values),
        *transfer_steps(
            prefix,
            kind=TransferKind.REFUND,
            reference=row("id"),
            memo=row("reference"),
            now=now,
            legs=[
                Leg(
                    row("provider_account_id"),
                    AccountKind.EARNINGS,
                    True,
                    row("provider_amount"),
                    BLOCKED,
                    may_be_zero=True,
                ),
                Leg(
                    const(PLATFORM, String),
                    AccountKind.REVENUE,
                    True,
                    row("platform_amount"),
                    BLOCKED,
                    may_be_zero=True,
                ),
                Leg(row("account_id"), AccountKind.AVAILABLE, False, row("amount")),
            ],
        ),
    ]


def _row(step: str) -> Any:
    def column(name: str) -> Expr:
        return lambda refs: refs.col(step, name)

    return column


# Parameter types of the rules' inputs.
ID = String
POINTS = BigInteger
BPS = Integer
TIME = UTCDateTime
