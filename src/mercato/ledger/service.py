"""The points ledger: double-entry transfers between ledger accounts.

Every operation posts one transfer whose entries sum to zero and moves the cached balances in
the caller's transaction (it never commits). Each runs inside a SAVEPOINT, so a refused
operation leaves nothing behind even when the caller goes on with its transaction.

Concurrency: on PostgreSQL a transfer is one call of `ledger_post_transfer` (migration 0008),
which locks the transfer's ledger accounts in id order (`FOR NO KEY UPDATE`) and checks every
guarded debit against the locked balance before it writes anything. On SQLite, where
`BEGIN IMMEDIATE` serialises writers, every debit of a guarded balance is conditional
(`... WHERE balance >= :n`) in the one UPDATE that moves the balances, whose row count decides.
A reservation resolves once: its state moves by `UPDATE ... WHERE state = :expected`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    CursorResult,
    Row,
    Select,
    String,
    Table,
    Update,
    bindparam,
    case,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mercato.core.errors import MercatoError
from mercato.core.ids import new_id
from mercato.db.base import UTCDateTime
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
from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer, Reservation
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

_ACCOUNTS = cast(Table, LedgerAccount.__table__)
_TRANSFERS = cast(Table, LedgerTransfer.__table__)
_ENTRIES = cast(Table, LedgerEntry.__table__)
_RESERVATIONS = cast(Table, Reservation.__table__)

# Statements of every transfer, built once (building one costs more than running it).
_INSERT_TRANSFER = _TRANSFERS.insert()
_INSERT_RESERVATION = _RESERVATIONS.insert()
_INSERT_ENTRIES = _ENTRIES.insert()
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
    try:
        with _atomic(session, savepoint):
            session.execute(
                _INSERT_RESERVATION,
                {
                    "id": reservation_id,
                    "account_id": account_id,
                    "reference": reference,
                    "amount": amount,
                    "state": ReservationState.HELD.value,
                    "created_at": now,
                },
            )
            _post(
                session,
                kind=TransferKind.RESERVE,
                reference=reservation_id,
                memo=reference,
                now=now,
                legs=[
                    _Leg(account_id, AccountKind.AVAILABLE, -amount, on_short=_short_of_points),
                    _Leg(account_id, AccountKind.RESERVED, amount),
                ],
            )
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


# --- the server-side operations (PostgreSQL; migration 0009, decision 0191) ----------------
#
# `ledger_reserve` and `ledger_settle` do what `reserve` and `settle` do, inside the
# invocation engine's one-statement accept and settle. They refuse by raising these SQLSTATEs,
# which take back everything the statement wrote.
SHORT_OF_POINTS = "MC001"
RESERVATION_RESOLVED = "MC003"
INVARIANT_BROKEN = "MC004"
SERVER_TRANSFER_LEGS = 3
"""Ids are sent for this many legs (the most a reserve or settle transfer has)."""


def check_reservation(*, amount: int, reference: str) -> None:
    """What `reserve` checks before it writes, for a reservation made on the server."""
    _check_amount(amount)
    if not reference or len(reference) > _REFERENCE_MAX:
        raise InvalidLedgerInput(f"reference must be 1-{_REFERENCE_MAX} characters")


def server_transfer_ids() -> dict[str, Any]:
    """Fresh ids for one transfer posted on the server: the transfer, an entry per leg, and an
    account per leg should it not exist yet (parameters of `ledger_reserve`/`ledger_settle`)."""
    return {
        "transfer_id": new_id("trf"),
        "entry_ids": [new_id("ent") for _ in range(SERVER_TRANSFER_LEGS)],
        "new_account_ids": [new_id("lac") for _ in range(SERVER_TRANSFER_LEGS)],
    }


def server_refusal(sqlstate: str | None, detail: str | None, *, amount: int) -> MercatoError | None:
    """The service's error for a refusal raised by a server-side ledger operation (None when
    `sqlstate` is not one of the ledger's): `amount` is what the reservation asked for."""
    if sqlstate == SHORT_OF_POINTS:
        return _short_of_points(int(detail or 0), amount)
    if sqlstate == RESERVATION_RESOLVED:
        return ReservationAlreadyResolved(
            f"the reservation is already {detail}", state=detail or "missing"
        )
    if sqlstate == INVARIANT_BROKEN:
        return LedgerInvariantViolated("a reserved balance is short of its reservation")
    return None


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
    if not _is_int(provider_share_bps) or not 0 <= provider_share_bps <= 10_000:
        raise InvalidLedgerInput("provider_share_bps must be an integer from 0 to 10000")
    with _atomic(session, savepoint):
        # Resolve and read in one statement: only a HELD reservation moves, once.
        params = {
            "r_id": reservation_id,
            "r_provider": provider_account_id,
            "r_bps": provider_share_bps,
            "r_now": now,
        }
        row = session.execute(_SETTLE_RESERVATION, params).first()
        if row is None:
            current = _load(session, reservation_id).state
            raise ReservationAlreadyResolved(
                f"reservation {reservation_id} is already {current.value}", state=current.value
            )
        account_id, amount, reference, provider_amount, platform_amount = row
        _post(
            session,
            kind=TransferKind.SETTLE,
            reference=reservation_id,
            memo=reference,
            now=now,
            legs=[
                _Leg(account_id, AccountKind.RESERVED, -amount),
                _Leg(provider_account_id, AccountKind.EARNINGS, provider_amount),
                _Leg(PLATFORM, AccountKind.REVENUE, platform_amount),
            ],
        )


def _settle_statement() -> Any:
    res = _RESERVATIONS.c
    provider_amount = res.amount * bindparam("r_bps", type_=BigInteger) // 10_000  # amounts >= 0
    return (
        update(_RESERVATIONS)
        .where(res.id == bindparam("r_id"), res.state == ReservationState.HELD.value)
        .values(
            state=ReservationState.SETTLED.value,
            provider_account_id=bindparam("r_provider"),
            provider_amount=provider_amount,
            platform_amount=res.amount - provider_amount,
            resolved_at=bindparam("r_now", type_=res.resolved_at.type),
        )
        .returning(
            res.account_id, res.amount, res.reference, res.provider_amount, res.platform_amount
        )
    )


_SETTLE_RESERVATION = _settle_statement()


def _atomic(session: Session, savepoint: bool) -> AbstractContextManager[Any]:
    """Each operation runs in a SAVEPOINT, so a refused one leaves nothing behind even when the
    caller goes on with its transaction. A caller whose transaction is all-or-nothing (the
    invocation engine's accept and settle transactions are rolled back whole when anything in
    them raises) passes `savepoint=False` and saves the SAVEPOINT's two round trips."""
    return session.begin_nested() if savepoint else nullcontext()


def release(
    session: Session, *, reservation_id: str, now: dt.datetime, savepoint: bool = True
) -> None:
    """Return a held reservation to the caller's available balance. (`savepoint`: `_atomic`.)"""
    with _atomic(session, savepoint):
        held = _load(session, reservation_id)
        _resolve(session, held, ReservationState.RELEASED, resolved_at=now)
        _post(
            session,
            kind=TransferKind.RELEASE,
            reference=held.id,
            memo=held.reference,
            now=now,
            legs=[
                _Leg(held.account_id, AccountKind.RESERVED, -held.amount),
                _Leg(held.account_id, AccountKind.AVAILABLE, held.amount),
            ],
        )


def refund(session: Session, *, reservation_id: str, now: dt.datetime) -> None:
    """Reverse both legs of a settled reservation: the full gross amount back to the caller."""
    with session.begin_nested():
        settled = _load(session, reservation_id)
        changed = _set_state(
            session,
            settled.id,
            expected=ReservationState.SETTLED,
            values={"state": ReservationState.REFUNDED.value, "refunded_at": now},
        )
        if not changed:
            state = _load(session, reservation_id).state
            if state is ReservationState.REFUNDED:
                raise ReservationAlreadyRefunded(f"reservation {reservation_id} is REFUNDED")
            raise ReservationNotSettled(f"reservation {reservation_id} is {state.value}")

        def blocked(balance: int, wanted: int) -> MercatoError:
            return RefundBlocked(f"refund needs {wanted} points from an account holding {balance}")

        assert settled.provider_account_id is not None
        _post(
            session,
            kind=TransferKind.REFUND,
            reference=settled.id,
            memo=settled.reference,
            now=now,
            legs=[
                _Leg(
                    settled.provider_account_id,
                    AccountKind.EARNINGS,
                    -(settled.provider_amount or 0),
                    on_short=blocked,
                ),
                _Leg(
                    PLATFORM, AccountKind.REVENUE, -(settled.platform_amount or 0), on_short=blocked
                ),
                _Leg(settled.account_id, AccountKind.AVAILABLE, settled.amount),
            ],
        )


def payout(
    session: Session, *, account_id: str, amount: int, now: dt.datetime, memo: str = ""
) -> str:
    """Retire `amount` of a provider's earnings (paid out of the system) back into issuance."""
    _check_amount(amount)
    _check_memo(memo)

    def short(balance: int, wanted: int) -> MercatoError:
        return InsufficientPoints(f"{wanted} points needed, {balance} earned", available=balance)

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
    """Return the account's available, reserved and earned points."""
    rows = session.execute(
        select(LedgerAccount.kind, LedgerAccount.balance).where(LedgerAccount.owner == account_id)
    ).all()
    by_kind = {kind: balance for kind, balance in rows}
    return Balances(
        available=by_kind.get(AccountKind.AVAILABLE.value, 0),
        reserved=by_kind.get(AccountKind.RESERVED.value, 0),
        earnings=by_kind.get(AccountKind.EARNINGS.value, 0),
    )


def platform_balances(session: Session) -> dict[str, int]:
    """Return the platform's `revenue` and `issuance` balances."""
    rows = session.execute(
        select(LedgerAccount.kind, LedgerAccount.balance).where(LedgerAccount.owner == PLATFORM)
    ).all()
    found = {kind: balance for kind, balance in rows}
    return {
        kind.value: found.get(kind.value, 0) for kind in (AccountKind.REVENUE, AccountKind.ISSUANCE)
    }


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


def _set_state(
    session: Session, reservation_id: str, *, expected: ReservationState, values: dict[str, Any]
) -> bool:
    """Move the reservation out of `expected`; false when it was not (or no longer) in it."""
    result = session.execute(
        update(_RESERVATIONS)
        .where(Reservation.id == reservation_id, Reservation.state == expected.value)
        .values(**values)
    )
    return cast(CursorResult[Any], result).rowcount == 1


def _resolve(
    session: Session, held: ReservationInfo, state: ReservationState, **values: Any
) -> None:
    if not _set_state(
        session, held.id, expected=ReservationState.HELD, values={"state": state.value, **values}
    ):
        current = _load(session, held.id).state
        raise ReservationAlreadyResolved(
            f"reservation {held.id} is already {current.value}", state=current.value
        )


# SQLite only (PostgreSQL creates accounts inside `ledger_post_transfer`): create an account
# unless another transaction did, then read its id.
_CREATE_ACCOUNT = sqlite.insert(_ACCOUNTS).on_conflict_do_nothing(index_elements=["owner", "kind"])
_ACCOUNT_ID = select(_ACCOUNTS.c.id).where(
    _ACCOUNTS.c.owner == bindparam("owner"), _ACCOUNTS.c.kind == bindparam("kind")
)


def _create_account(session: Session, owner: str, kind: AccountKind) -> str:
    keys = {"owner": owner, "kind": kind.value}
    session.execute(_CREATE_ACCOUNT, {"id": new_id("lac"), "balance": 0, **keys})
    return str(session.execute(_ACCOUNT_ID, keys).scalar_one())


def _post(
    session: Session,
    *,
    kind: TransferKind,
    reference: str | None,
    memo: str,
    now: dt.datetime,
    legs: Sequence[_Leg],
) -> str:
    """Post one transfer: its accounts (created when missing), the transfer and its entries,
    and every balance moved by one conditional UPDATE; a guarded debit that finds too little
    raises its leg's error.

    On PostgreSQL this is one call of `ledger_post_transfer` (one round trip; it locks the
    accounts in id order and refuses before writing anything). On SQLite it is a few
    statements under the writer lock BEGIN IMMEDIATE already holds, and a refused debit is
    taken back by the caller's SAVEPOINT or rollback.
    """
    legs = [leg for leg in legs if leg.amount != 0]
    if len(legs) < 2:  # verify-ledger holds every transfer to two entries or more
        raise LedgerInvariantViolated(f"{kind.value} transfer moves nothing")
    if sum(leg.amount for leg in legs) != 0:
        raise LedgerInvariantViolated(f"{kind.value} transfer does not balance")
    if len({(leg.owner, leg.kind) for leg in legs}) != len(legs):
        raise LedgerInvariantViolated(f"{kind.value} transfer names one account twice")
    transfer_id = new_id("trf")
    if session.get_bind().dialect.name == "postgresql":
        _post_on_server(session, transfer_id, kind, reference, memo, now, legs)
        return transfer_id
    id_of = _account_ids(session, [(leg.owner, leg.kind) for leg in legs])
    ids = [id_of[(leg.owner, leg.kind)] for leg in legs]
    session.execute(
        _INSERT_TRANSFER,
        {
            "id": transfer_id,
            "kind": kind.value,
            "reference": reference,
            "memo": memo,
            "created_at": now,
        },
    )
    session.execute(
        _INSERT_ENTRIES,
        [
            {
                "id": new_id("ent"),
                "transfer_id": transfer_id,
                "ledger_account_id": account_id,
                "amount": leg.amount,
            }
            for leg, account_id in zip(legs, ids, strict=True)
        ],
    )
    # (SQLite: BEGIN IMMEDIATE already serialises every writer, so there is nothing to lock.)
    _move(session, list(zip(legs, ids, strict=True)))
    return transfer_id


# PostgreSQL posts a transfer in one round trip: migration 0008's `ledger_post_transfer` finds
# or creates the accounts, locks them in id order, refuses a short guarded debit before writing
# anything, then appends the transfer and its entries and moves the balances (decision 0186).
_POST_TRANSFER = text(
    "SELECT short_leg, short_balance FROM ledger_post_transfer("
    "CAST(:id AS text), CAST(:kind AS text), CAST(:reference AS text), CAST(:memo AS text), "
    ":created_at, CAST(:owners AS text[]), CAST(:kinds AS text[]), CAST(:amounts AS bigint[]), "
    "CAST(:guarded AS boolean[]), CAST(:entry_ids AS text[]), CAST(:account_ids AS text[]))"
).bindparams(bindparam("created_at", type_=UTCDateTime()))


def _post_on_server(
    session: Session,
    transfer_id: str,
    kind: TransferKind,
    reference: str | None,
    memo: str,
    now: dt.datetime,
    legs: Sequence[_Leg],
) -> None:
    row = session.execute(
        _POST_TRANSFER,
        {
            "id": transfer_id,
            "kind": kind.value,
            "reference": reference,
            "memo": memo,
            "created_at": now,
            "owners": [leg.owner for leg in legs],
            "kinds": [leg.kind.value for leg in legs],
            "amounts": [leg.amount for leg in legs],
            "guarded": [_guarded(leg) for leg in legs],
            "entry_ids": [new_id("ent") for _ in legs],
            "account_ids": [new_id("lac") for _ in legs],
        },
    ).one()
    if row.short_leg is not None:
        leg = legs[row.short_leg]
        raise (leg.on_short or _invariant_broken)(row.short_balance, -leg.amount)


def _account_ids(
    session: Session, keys: Sequence[tuple[str, AccountKind]]
) -> dict[tuple[str, AccountKind], str]:
    """The ledger account ids of (owner, kind) pairs, created when missing (one read when not)."""
    owners = sorted({owner for owner, _ in keys})
    params = {f"owner{i}": owner for i, owner in enumerate(owners)}
    rows = session.execute(_accounts_of_owners(len(owners)), params).all()
    found = {(row[1], AccountKind(row[2])): row[0] for row in rows}
    # Create missing accounts in one global (owner, kind) order, so that two transfers
    # inserting the same new accounts wait on each other instead of deadlocking.
    for key in sorted(set(keys) - found.keys(), key=lambda k: (k[0], k[1].value)):
        found[key] = _create_account(session, key[0], key[1])
    return found


def _move(session: Session, legs: Sequence[tuple[_Leg, str]]) -> None:
    """Move every leg's balance in one UPDATE; each debit of a guarded balance is conditional
    (`balance >= n`), and the row count, not a balance read earlier, decides: correct under any
    isolation level."""
    shape = tuple(_guarded(leg) for leg, _ in legs)
    params: dict[str, Any] = {}
    for i, (leg, account_id) in enumerate(legs):
        params[f"id{i}"] = account_id
        params[f"amount{i}"] = leg.amount
        if shape[i]:
            params[f"need{i}"] = -leg.amount
    result = cast(CursorResult[Any], session.execute(_move_statement(shape), params))
    if result.rowcount == len(legs):
        return
    # Refused (the caller's SAVEPOINT takes back what did move): name the debit that was short.
    guarded = [(leg, account_id) for leg, account_id in legs if _guarded(leg)]
    rows = session.execute(
        select(_ACCOUNTS.c.id, _ACCOUNTS.c.balance).where(
            _ACCOUNTS.c.id.in_([account_id for _, account_id in guarded])
        )
    )
    balance_of: dict[str, int] = {row[0]: row[1] for row in rows}
    for leg, account_id in guarded:
        balance = balance_of.get(account_id, 0)
        if balance < -leg.amount:
            raise (leg.on_short or _invariant_broken)(balance, -leg.amount)
    raise LedgerInvariantViolated("a balance update touched fewer accounts than the transfer")


# One bind parameter per owner, one statement per arity (a transfer has two to four legs), built
# once: an `expanding` parameter would be re-rendered into SQL on every execution, which cost
# more CPU than running the statement.
@lru_cache(maxsize=8)
def _accounts_of_owners(count: int) -> Select[tuple[str, str, str]]:
    owners = [bindparam(f"owner{i}", type_=String) for i in range(count)]
    return select(_ACCOUNTS.c.id, _ACCOUNTS.c.owner, _ACCOUNTS.c.kind).where(
        _ACCOUNTS.c.owner.in_(owners)
    )


@lru_cache(maxsize=32)
def _move_statement(shape: tuple[bool, ...]) -> Update:
    """`UPDATE ledger_accounts SET balance = balance + CASE id WHEN :id0 THEN :amount0 ... END
    WHERE id IN (:id0, ...) AND (id <> :idG OR balance >= :needG) ...`, one statement per shape
    (which legs are guarded debits), built once so no call pays for building it."""
    table = _ACCOUNTS
    ids = [bindparam(f"id{i}", type_=String) for i in range(len(shape))]
    amounts = [bindparam(f"amount{i}", type_=BigInteger) for i in range(len(shape))]
    delta = case(*[(table.c.id == ids[i], amounts[i]) for i in range(len(shape))])
    conditions: list[ColumnElement[bool]] = [table.c.id.in_(ids)]
    for i, guarded in enumerate(shape):
        if guarded:
            need = bindparam(f"need{i}", type_=BigInteger)
            conditions.append(or_(table.c.id != ids[i], table.c.balance >= need))
    return update(table).where(*conditions).values(balance=table.c.balance + delta)


def _guarded(leg: _Leg) -> bool:
    return leg.amount < 0 and leg.kind is not AccountKind.ISSUANCE


def _invariant_broken(balance: int, wanted: int) -> MercatoError:
    return LedgerInvariantViolated(f"a debit of {wanted} found only {balance}")
