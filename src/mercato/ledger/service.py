"""The points ledger: double-entry transfers between ledger accounts.

Every operation posts one transfer whose entries sum to zero and moves the cached balances in
the caller's transaction (it never commits). Each runs inside a SAVEPOINT, so a refused
operation leaves nothing behind even when the caller goes on with its transaction.

Every rule (reserve, settle, release, refund, a plain transfer) is written once, as guarded
Core statements in `mercato.ledger.rules`, and run by `mercato.db.guarded`: on PostgreSQL one
statement (a data-modifying CTE that locks the transfer's accounts in id order, moves each
guarded debit only when the balance covers it, and aborts whole on a refusal), on SQLite the
same statements one after another under the writer lock BEGIN IMMEDIATE holds. A reservation
resolves once: its state moves by `UPDATE … WHERE state = :expected` (and a trigger refuses any
other change). A reservation is one pending transfer and a settle writes no balance row: the
credits are folded later (`fold`) and every read is folded + not folded yet (decision 0595).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import Row, String, Table, and_, bindparam, func, literal, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mercato.core.errors import MercatoError
from mercato.core.ids import new_id
from mercato.db import guarded, runner
from mercato.db.plans import Plan, Rows, first, query
from mercato.ledger import rules
from mercato.ledger.checks import run_checks
from mercato.ledger.errors import (
    InsufficientPoints,
    InvalidLedgerInput,
    LedgerInvariantViolated,
    RefundBlocked,
    ReservationAlreadyRefunded,
    ReservationAlreadyResolved,
    ReservationExists,
    ReservationNotFound,
    ReservationNotSettled,
)
from mercato.ledger.models import LedgerAccount, Reservation
from mercato.ledger.schemas import (
    PLATFORM,
    AccountKind,
    Balances,
    LedgerReport,
    ReservationInfo,
    ReservationState,
    TransferKind,
)

MAX_AMOUNT = 10**15
"""Far above any real price or grant; keeps every sum far inside BIGINT."""

_REFERENCE_MAX = 100
MEMO_MAX = 200
"""Longest memo a transfer keeps (a grant's reason)."""

_RESERVATIONS = cast(Table, Reservation.__table__)
_LOAD_RESERVATION = select(_RESERVATIONS).where(_RESERVATIONS.c.id == bindparam("id"))

ErrorFactory = Callable[[int, int], MercatoError]
"""Builds the error for a refused debit from (balance, amount)."""


@dataclass(frozen=True)
class _Leg:
    owner: str
    kind: AccountKind
    amount: int  # signed: positive raises the balance
    on_short: ErrorFactory | None = None  # the error when a debit finds too little


# --- operations ---------------------------------------------------------------------------


def grant(
    session: Session, *, account_id: str, amount: int, now: dt.datetime, memo: str = ""
) -> str:
    """Move `amount` new points from platform issuance to the account's available balance."""
    _check_amount(amount)
    _check_memo(memo)
    with session.begin_nested():
        return _post(
            session,
            kind=TransferKind.GRANT,
            reference=None,
            memo=memo,
            now=now,
            legs=[
                _Leg(PLATFORM, AccountKind.ISSUANCE, -amount),
                _Leg(account_id, AccountKind.AVAILABLE, amount),
            ],
        )


def reserve(
    session: Session,
    *,
    account_id: str,
    amount: int,
    reference: str,
    now: dt.datetime,
    reservation_id: str | None = None,
    savepoint: bool = True,
) -> str:
    """Hold `amount` of the account's available points for the call `reference`.

    `reservation_id` lets a caller that records the reservation's id before reserving (the
    invocation row does) choose it; a fresh one is made otherwise. (`savepoint`: `_atomic`.)"""
    check_reservation(amount=amount, reference=reference)
    reservation_id = reservation_id or new_id("res")
    params = {
        "reservation_id": reservation_id,
        "account_id": account_id,
        "amount": amount,
        "reference": reference,
        "now": now,
    }
    try:
        with _atomic(session, savepoint):
            runner.run(session, _RESERVE, params, lambda refused: refusal(refused, amount=amount))
    except IntegrityError:
        if not savepoint:
            raise  # the caller's transaction is aborted; it rolls back whole
        if find_reservation(session, reference=reference) is not None:
            raise ReservationExists(f"reference {reference!r} already has a reservation") from None
        raise
    return reservation_id


def _short_of_points(balance: int, wanted: int) -> MercatoError:
    return InsufficientPoints(
        f"{wanted} points needed, {balance} available", available=balance, required=wanted
    )


def check_reservation(*, amount: int, reference: str) -> None:
    """What `reserve` checks before it writes. (The invocation engine's accept reserves a
    version's price, checked when the version was written, under the call's fresh id.)"""
    _check_amount(amount)
    if not reference or len(reference) > _REFERENCE_MAX:
        raise InvalidLedgerInput(f"reference must be 1-{_REFERENCE_MAX} characters")


def refusal(refused: guarded.Refused, *, amount: int = 0) -> MercatoError:
    """The service's error for a refusal of one of `rules`' steps (`amount`: what a
    reservation asked for)."""
    code = refused.code
    if code == rules.SHORT:
        return _short_of_points(refused.number(0), refused.number(1) or amount)
    if code == rules.RESOLVED:
        state = refused.detail[0] if refused.detail else None
        if state is None:
            return ReservationNotFound("no such reservation")
        return ReservationAlreadyResolved(f"the reservation is already {state}", state=state)
    if code == rules.NOT_SETTLED:
        state = refused.detail[0] if refused.detail else None
        if state is None:
            return ReservationNotFound("no such reservation")
        if state == ReservationState.REFUNDED.value:
            return ReservationAlreadyRefunded("the reservation is REFUNDED")
        return ReservationNotSettled(f"the reservation is {state}")
    if code == rules.BLOCKED:
        balance, wanted = refused.number(0), refused.number(1)
        return RefundBlocked(f"refund needs {wanted} points from an account holding {balance}")
    if code == rules.INVARIANT:
        return LedgerInvariantViolated("a reserved balance is short of its reservation")
    return LedgerInvariantViolated(f"refused: {code}")


def settle(
    session: Session,
    *,
    reservation_id: str,
    provider_account_id: str,
    provider_share_bps: int,
    now: dt.datetime,
    savepoint: bool = True,
) -> None:
    """Charge a held reservation: the provider's share (rounded down) to its earnings, the rest
    to platform revenue. (`savepoint`: see `_atomic`.)"""
    check_share(provider_share_bps)
    params = {
        "reservation_id": reservation_id,
        "provider_account_id": provider_account_id,
        "share_bps": provider_share_bps,
        "now": now,
    }
    _resolve_with(session, _SETTLE, params, savepoint)


def check_share(provider_share_bps: object) -> None:
    """A provider share is an integer number of basis points from 0 to 10000."""
    if not _is_int(provider_share_bps) or not 0 <= cast(int, provider_share_bps) <= 10_000:
        raise InvalidLedgerInput("provider_share_bps must be an integer from 0 to 10000")


def _resolve_with(
    session: Session, program: guarded.Program, params: dict[str, Any], savepoint: bool
) -> None:
    with _atomic(session, savepoint):
        runner.run(session, program, params, refusal)


def _atomic(session: Session, savepoint: bool) -> AbstractContextManager[Any]:
    """Each operation runs in a SAVEPOINT, so a refused one leaves nothing behind even when the
    caller goes on with its transaction. A caller whose transaction is all-or-nothing passes
    `savepoint=False` and saves the SAVEPOINT's two round trips."""
    return session.begin_nested() if savepoint else nullcontext()


def release(
    session: Session, *, reservation_id: str, now: dt.datetime, savepoint: bool = True
) -> None:
    """Return a held reservation to the caller's available balance. (`savepoint`: `_atomic`.)"""
    params = {"reservation_id": reservation_id, "now": now}
    _resolve_with(session, _RELEASE, params, savepoint)


def refund(session: Session, *, reservation_id: str, now: dt.datetime) -> None:
    """Reverse both legs of a settled reservation: the full gross amount back to the caller.

    It folds every credit first (`fold`, which on PostgreSQL holds the money lock exclusively
    until the caller's transaction ends), so the guarded debits of the provider's earnings and
    platform revenue see their exact balances."""
    params = {"reservation_id": reservation_id, "now": now}
    fold(session)
    _resolve_with(session, _REFUND, params, savepoint=True)


# The standalone operations' programs, built once per dialect on first use.
_RESERVE = guarded.Program(
    "ledger-reserve",
    tuple(
        rules.reserve_steps(
            "reserve",
            reservation_id=guarded.param("reservation_id", rules.ID),
            account_id=guarded.param("account_id", rules.ID),
            amount=guarded.param("amount", rules.POINTS),
            reference=guarded.param("reference", rules.ID),
            now=guarded.param("now", rules.TIME),
        )
    ),
)
_SETTLE = guarded.Program(
    "ledger-settle",
    tuple(
        rules.settle_steps(
            "settle",
            reservation_id=guarded.param("reservation_id", rules.ID),
            provider_account_id=guarded.param("provider_account_id", rules.ID),
            share_bps=guarded.param("share_bps", rules.BPS),
            now=guarded.param("now", rules.TIME),
        )
    ),
)
_RELEASE = guarded.Program(
    "ledger-release",
    tuple(
        rules.release_steps(
            "release",
            reservation_id=guarded.param("reservation_id", rules.ID),
            now=guarded.param("now", rules.TIME),
        )
    ),
)
_REFUND = guarded.Program(
    "ledger-refund",
    tuple(
        rules.refund_steps(
            "refund",
            reservation_id=guarded.param("reservation_id", rules.ID),
            now=guarded.param("now", rules.TIME),
        )
    ),
)


def payout(
    session: Session, *, account_id: str, amount: int, now: dt.datetime, memo: str = ""
) -> str:
    """Retire `amount` of a provider's earnings (paid out of the system) back into issuance."""
    _check_amount(amount)
    _check_memo(memo)

    def short(balance: int, wanted: int) -> MercatoError:
        return InsufficientPoints(f"{wanted} points needed, {balance} earned", available=balance)

    fold(session)  # the debit sees the exact earnings (as `refund`)
    with session.begin_nested():
        return _post(
            session,
            kind=TransferKind.PAYOUT,
            reference=None,
            memo=memo,
            now=now,
            legs=[
                _Leg(account_id, AccountKind.EARNINGS, -amount, on_short=short),
                _Leg(PLATFORM, AccountKind.ISSUANCE, amount),
            ],
        )


# --- reads --------------------------------------------------------------------------------


def balances(session: Session, *, account_id: str) -> Balances:
    """Return the account's available, reserved and earned points, exact at any moment: one
    statement (one snapshot) reads available, the sum of its HELD reservations, and its
    earnings as folded plus the credits not folded yet."""
    row = session.execute(_BALANCES, {"owner": account_id}).one()
    return Balances(available=int(row[0]), reserved=int(row[1]), earnings=int(row[2]))


_ACCOUNTS = cast(Table, LedgerAccount.__table__)


def _account_column(column: Any, owner: Any, kind: AccountKind) -> Any:
    return (
        select(column)
        .where(_ACCOUNTS.c.owner == owner, _ACCOUNTS.c.kind == kind.value)
        .scalar_subquery()
    )


def exact_earnings(owner: Any) -> Any:
    """The exact earnings of `owner` (an expression): folded, plus the credits of its settled
    calls numbered above the fold's cursor (revenue's watermark: a fold moves every credit up to
    it, so none of the owner's lies between its own watermark and the cursor)."""
    res = _RESERVATIONS.c
    folded = func.coalesce(_account_column(_ACCOUNTS.c.balance, owner, AccountKind.EARNINGS), 0)
    unfolded = (
        select(func.coalesce(func.sum(res.provider_amount), 0))
        .where(_not_folded(res), res.provider_account_id == owner)
        .scalar_subquery()
    )
    return folded + unfolded


def _cursor() -> Any:
    """The fold's cursor: platform revenue's watermark (0 before any fold)."""
    return func.coalesce(
        _account_column(_ACCOUNTS.c.folded_through, literal(PLATFORM), AccountKind.REVENUE), 0
    )


def _not_folded(res: Any) -> Any:
    """The credits above the fold's cursor, as a range closed by the highest credit number:
    PostgreSQL cannot know the cursor when it plans, and takes `credit_seq > cursor` alone for a
    third of the table (a scan of every reservation); a range between two unknowns it takes for
    a narrow one, and reads it from the index of the credit numbers, as the fold does."""
    credits = _RESERVATIONS.alias("credits").c
    highest = (
        select(func.max(credits.credit_seq))
        .where(credits.credit_seq.is_not(None))
        .scalar_subquery()
    )
    return and_(res.credit_seq > _cursor(), res.credit_seq <= highest)


def exact_revenue() -> Any:
    """Platform revenue, exact (as `exact_earnings`)."""
    res = _RESERVATIONS.c
    folded = func.coalesce(
        _account_column(_ACCOUNTS.c.balance, literal(PLATFORM), AccountKind.REVENUE), 0
    )
    unfolded = (
        select(func.coalesce(func.sum(res.platform_amount), 0))
        .where(_not_folded(res))
        .scalar_subquery()
    )
    return folded + unfolded


def _held(owner: Any) -> Any:
    res = _RESERVATIONS.c
    return (
        select(func.coalesce(func.sum(res.amount), 0))
        .where(res.account_id == owner, res.state == ReservationState.HELD.value)
        .scalar_subquery()
    )


_OWNER = bindparam("owner", type_=String)
_BALANCES = select(
    func.coalesce(_account_column(_ACCOUNTS.c.balance, _OWNER, AccountKind.AVAILABLE), 0),
    _held(_OWNER),
    exact_earnings(_OWNER),
)
_PLATFORM = select(
    exact_revenue(),
    func.coalesce(_account_column(_ACCOUNTS.c.balance, literal(PLATFORM), AccountKind.ISSUANCE), 0),
)


def fold(session: Session) -> int:
    """Fold every settled call's credits not folded yet into the provider's earnings and the
    platform's revenue balances; return how many credits it folded (decision 0595).

    One pass in the caller's transaction: the credits numbered above revenue's watermark (the
    fold's cursor) up to the highest, summed per provider; each provider's earnings that gained
    something and platform revenue get the sums added and their watermark set to that highest
    number. Balances read exact before, during and after: a read is folded + not folded, in one
    statement. On PostgreSQL it first takes the money lock exclusively (every money statement
    holds it shared, and numbers credits only under it), so no credit below the highest number
    it sees can still commit after it: none is skipped. On SQLite BEGIN IMMEDIATE serialises."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": guarded.MONEY_LOCK})
    res = _RESERVATIONS.c
    cursor = session.execute(
        select(_ACCOUNTS.c.folded_through).where(
            _ACCOUNTS.c.owner == PLATFORM, _ACCOUNTS.c.kind == AccountKind.REVENUE.value
        )
    ).scalar()
    low = int(cursor or 0)
    high = session.execute(
        select(func.max(res.credit_seq)).where(res.credit_seq.is_not(None))  # the partial index
    ).scalar()
    if high is None or int(high) <= low:
        return 0
    rows = session.execute(
        select(
            res.provider_account_id,
            func.sum(res.provider_amount),
            func.sum(res.platform_amount),
            func.count(),
        )
        .where(res.credit_seq > low, res.credit_seq <= high)
        .group_by(res.provider_account_id)
        .order_by(res.provider_account_id)
    ).all()
    folded = 0
    revenue = 0
    for provider, earned, platform, count in rows:
        folded += int(count)
        revenue += int(platform or 0)
        if earned:
            _fold_into(session, provider, AccountKind.EARNINGS, int(earned), int(high))
    _fold_into(session, PLATFORM, AccountKind.REVENUE, revenue, int(high))
    return folded


def _fold_into(session: Session, owner: str, kind: AccountKind, points: int, high: int) -> None:
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(_ACCOUNTS).values(
        id=new_id("lac"), owner=owner, kind=kind.value, balance=points, folded_through=high
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[_ACCOUNTS.c.owner, _ACCOUNTS.c.kind],
            set_={
                "balance": _ACCOUNTS.c.balance + stmt.excluded.balance,
                "folded_through": stmt.excluded.folded_through,
            },
        )
    )


_AVAILABLE = select(LedgerAccount.__table__.c.balance).where(
    LedgerAccount.__table__.c.owner == bindparam("owner"),
    LedgerAccount.__table__.c.kind == AccountKind.AVAILABLE.value,
)


@query
def available_points(*, account_id: str) -> Plan[int]:
    """The account's available points (0 when it has no ledger account yet)."""
    row = first((yield Rows(_AVAILABLE, {"owner": account_id})))
    return 0 if row is None else int(row[0])


def short_of_points(balance: int, wanted: int) -> MercatoError:
    """The refusal of a call that wants `wanted` points from an account holding `balance`."""
    return _short_of_points(balance, wanted)


def platform_balances(session: Session) -> dict[str, int]:
    """Return the platform's `revenue` (exact: folded + not folded yet) and `issuance`."""
    revenue, issuance = session.execute(_PLATFORM).one()
    return {AccountKind.REVENUE.value: int(revenue), AccountKind.ISSUANCE.value: int(issuance)}


def get_reservation(session: Session, *, reservation_id: str) -> ReservationInfo:
    """Return one reservation; raise ReservationNotFound."""
    return _load(session, reservation_id)


def find_reservation(session: Session, *, reference: str) -> ReservationInfo | None:
    """Return the reservation made for `reference` (an invocation id), if any."""
    row = session.execute(
        select(_RESERVATIONS).where(_RESERVATIONS.c.reference == reference)
    ).first()
    return _info(row) if row is not None else None


def verify(session: Session) -> LedgerReport:
    """Re-prove the ledger's invariants from its entries. Give it a snapshot-consistent session
    (REPEATABLE READ on PostgreSQL) when writers may be running."""
    return run_checks(session)


# --- internals ----------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_amount(amount: object) -> None:
    if not _is_int(amount) or not 0 < cast(int, amount) <= MAX_AMOUNT:
        raise InvalidLedgerInput(f"amount must be an integer from 1 to {MAX_AMOUNT}")


def _check_memo(memo: str) -> None:
    if len(memo) > MEMO_MAX:
        raise InvalidLedgerInput(f"memo must be at most {MEMO_MAX} characters")


def _info(row: Row[Any]) -> ReservationInfo:
    return ReservationInfo(
        id=row.id,
        account_id=row.account_id,
        reference=row.reference,
        amount=row.amount,
        state=ReservationState(row.state),
        provider_account_id=row.provider_account_id,
        provider_amount=row.provider_amount,
        platform_amount=row.platform_amount,
        created_at=row.created_at,
        resolved_at=row.resolved_at,
        refunded_at=row.refunded_at,
    )


def _load(session: Session, reservation_id: str) -> ReservationInfo:
    row = session.execute(_LOAD_RESERVATION, {"id": reservation_id}).first()
    if row is None:
        raise ReservationNotFound(f"no reservation {reservation_id}")
    return _info(row)


def _post(
    session: Session,
    *,
    kind: TransferKind,
    reference: str | None,
    memo: str,
    now: dt.datetime,
    legs: Sequence[_Leg],
) -> str:
    """Post one transfer of legs known in Python (a grant, a payout): `rules.transfer_steps`
    for the legs' shape, built once per shape and dialect; a guarded debit that finds too
    little raises its leg's error, and nothing of the transfer is written (PostgreSQL: the
    statement aborts; SQLite: the caller's SAVEPOINT or rollback takes it back)."""
    legs = [leg for leg in legs if leg.amount != 0]
    if len(legs) < 2:  # verify-ledger holds every transfer to two entries or more
        raise LedgerInvariantViolated(f"{kind.value} transfer moves nothing")
    if sum(leg.amount for leg in legs) != 0:
        raise LedgerInvariantViolated(f"{kind.value} transfer does not balance")
    if len({(leg.owner, leg.kind) for leg in legs}) != len(legs):
        raise LedgerInvariantViolated(f"{kind.value} transfer names one account twice")
    params: dict[str, Any] = {
        "kind": kind.value,
        "reference": reference,
        "memo": memo,
        "now": now,
        "post_transfer": new_id("trf"),
    }
    for i, leg in enumerate(legs):
        params[f"owner{i}"] = leg.owner
        params[f"points{i}"] = abs(leg.amount)
    program = _transfer_program(kind, tuple((leg.kind, leg.amount < 0) for leg in legs))

    def short(refused: guarded.Refused) -> MercatoError:
        leg = legs[int(refused.code.removeprefix("leg"))]
        return (leg.on_short or _invariant_broken)(refused.number(0), -leg.amount)

    runner.run(session, program, params, short)
    return str(params["post_transfer"])


@lru_cache(maxsize=64)
def _transfer_program(
    kind: TransferKind, shape: tuple[tuple[AccountKind, bool], ...]
) -> guarded.Program:
    """The program of a transfer whose legs have this (account kind, is a debit) shape."""
    legs = [
        rules.Leg(
            guarded.param(f"owner{i}", rules.ID),
            account_kind,
            debit,
            guarded.param(f"points{i}", rules.POINTS),
            refusal=f"leg{i}",
        )
        for i, (account_kind, debit) in enumerate(shape)
    ]
    steps = rules.transfer_steps(
        "post",
        kind=kind,
        reference=guarded.param("reference", rules.ID),
        memo=guarded.param("memo", rules.ID),
        now=guarded.param("now", rules.TIME),
        legs=legs,
    )
    return guarded.Program(f"ledger-transfer-{kind.value}", tuple(steps))


def _invariant_broken(balance: int, wanted: int) -> MercatoError:
    return LedgerInvariantViolated(f"a debit of {wanted} found only {balance}")
