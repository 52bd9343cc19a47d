"""Cases: submission, visibility, staff decisions and the refund step. Never commits.

Every state change is a conditional UPDATE on the state it leaves, so a decision or a refund
happens once even when two staff members (or two workers) act at the same moment. A refund
posts in the same transaction as the case's and the receipt's move to REFUNDED.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, cast

from sqlalchemy import CursorResult, Row, Table, select, update
from sqlalchemy.orm import Session

from mercato.cases.errors import (
    CaseNotFound,
    DisputeAlreadyOpen,
    DisputeNotEligible,
    InvalidCaseInput,
    InvalidCaseTransition,
    InvalidCursor,
)
from mercato.cases.models import Case
from mercato.cases.schemas import DECISIONS, CaseState, CaseView, Category, Decision, Kind, Page
from mercato.catalog import service as catalog
from mercato.core.canonical import canonical_json, sha256_hex
from mercato.core.cursors import decode_cursor, encode_cursor
from mercato.core.ids import new_id
from mercato.invocations import service as invocations
from mercato.invocations.errors import IdempotencyKeyReused
from mercato.invocations.schemas import Settlement
from mercato.ledger import service as ledger
from mercato.ledger.errors import RefundBlocked, ReservationAlreadyRefunded, ReservationNotSettled

_t = cast(Table, Case.__table__)
_c = _t.c
TEXT_MAX = 2000
MAX_PAGE = 100
REFUND_BACKOFF_BASE = 15.0
REFUND_BACKOFF_CAP = 3600.0

_VIEW_COLUMNS = (
    _c.id,
    _c.kind,
    _c.state,
    _c.account_id,
    _c.idempotency_key,
    _c.fingerprint,
    _c.statement,
    _c.invocation_id,
    _c.service_code,
    _c.version,
    _c.category,
    _c.decided_by,
    _c.decided_at,
    _c.decision_reason,
    _c.refund_attempts,
    _c.refund_next_attempt_at,
    _c.refund_last_error,
    _c.refunded_at,
    _c.hold_id,
    _c.created_at,
    _c.updated_at,
)


class RefundResult(enum.StrEnum):
    REFUNDED = "REFUNDED"  # posted now (or found already posted): case and receipt REFUNDED
    BLOCKED = "BLOCKED"  # the ledger cannot post it yet; retried later
    STUCK = "STUCK"  # the ledger refuses for good; left APPROVED for an operator
    NOT_DUE = "NOT_DUE"  # the case is not (or no longer) waiting for a refund


def _view(row: Row[Any]) -> CaseView:
    return CaseView(*row)


def fingerprint_of(kind: Kind, body: dict[str, Any]) -> str:
    """SHA-256 over the kind and the canonical JSON of the submitted members."""
    return sha256_hex(canonical_json({"kind": kind.value, "body": body}))


def check_text(value: str, *, name: str) -> str:
    """A free text of 1-2000 characters that is not only whitespace."""
    if not value.strip() or len(value) > TEXT_MAX:
        raise InvalidCaseInput(f"{name} must be 1-{TEXT_MAX} characters and not blank.")
    return value


# --- reads -------------------------------------------------------------------------------


def find_by_key(session: Session, *, account_id: str, idempotency_key: str) -> CaseView | None:
    """The account's case submitted with this Idempotency-Key, if any."""
    row = session.execute(
        select(*_VIEW_COLUMNS).where(
            _c.account_id == account_id, _c.idempotency_key == idempotency_key
        )
    ).first()
    return None if row is None else _view(row)


def replay(existing: CaseView, fingerprint: str) -> CaseView:
    """The original case for a retried submission; another body under the same key is 422."""
    if existing.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used for a different submission; use a new key.",
            caseId=existing.case_id,
        )
    return existing


def get_case(session: Session, *, case_id: str) -> CaseView:
    row = session.execute(select(*_VIEW_COLUMNS).where(_c.id == case_id)).first()
    if row is None:
        raise CaseNotFound()
    return _view(row)


def get_case_for(session: Session, *, case_id: str, account_id: str, is_staff: bool) -> CaseView:
    """The case if `account_id` submitted it (staff: any case); others get 404."""
    query = select(*_VIEW_COLUMNS).where(_c.id == case_id)
    if not is_staff:
        query = query.where(_c.account_id == account_id)
    row = session.execute(query).first()
    if row is None:
        raise CaseNotFound()
    return _view(row)


def _decode_cursor(cursor: str) -> str:
    value = decode_cursor(cursor)
    if value is None or not value.startswith("case_") or len(value) > 40:
        raise InvalidCursor("The cursor is not valid.")
    return value


def list_cases(
    session: Session,
    *,
    account_id: str | None,
    limit: int = 20,
    cursor: str | None = None,
    kind: str | None = None,
    state: str | None = None,
) -> Page:
    """Cases newest first (keyset on the time-ordered id); `account_id=None` lists all."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidCaseInput(f"limit must be 1-{MAX_PAGE}")
    query = select(*_VIEW_COLUMNS)
    if account_id is not None:
        query = query.where(_c.account_id == account_id)
    if kind is not None:
        if kind not in Kind.__members__:
            raise InvalidCaseInput(f"kind must be one of {', '.join(Kind)}")
        query = query.where(_c.kind == kind)
    if state is not None:
        if state not in CaseState.__members__:
            raise InvalidCaseInput(f"state must be one of {', '.join(CaseState)}")
        query = query.where(_c.state == state)
    if cursor is not None:
        query = query.where(_c.id < _decode_cursor(cursor))
    rows = session.execute(query.order_by(_c.id.desc()).limit(limit + 1)).all()
    items = [_view(r) for r in rows[:limit]]
    more = len(rows) > limit
    return Page(items=items, next_cursor=encode_cursor(items[-1].case_id) if more else None)


# --- submission --------------------------------------------------------------------------


def _insert(session: Session, *, now: dt.datetime, **values: Any) -> CaseView:
    case_id = new_id("case")
    session.execute(
        _t.insert().values(
            id=case_id,
            state=CaseState.OPEN.value,
            refund_attempts=0,
            created_at=now,
            updated_at=now,
            **values,
        )
    )
    return get_case(session, case_id=case_id)


def open_dispute(
    session: Session,
    *,
    account_id: str,
    idempotency_key: str,
    fingerprint: str,
    invocation_id: str,
    reason: str,
    now: dt.datetime,
) -> CaseView:
    """Open a dispute on the account's own settled session call (DESIGN.md §9)."""
    check_text(reason, name="reason")
    call = invocations.get_invocation_for_owner(
        session, account_id=account_id, invocation_id=invocation_id
    )
    if call.channel != "SESSION":
        raise DisputeNotEligible(
            "Calls made with an API key are automated and cannot be disputed.", reason="API_KEY"
        )
    if call.settlement != Settlement.SETTLED:
        raise DisputeNotEligible(
            f"Only a settled call can be disputed; this one is {call.settlement}.",
            reason=call.settlement,
        )
    open_case = session.execute(
        select(_c.id).where(
            _c.invocation_id == invocation_id,
            _c.kind == Kind.DISPUTE.value,
            _c.state.in_([CaseState.OPEN.value, CaseState.APPROVED.value]),
        )
    ).scalar()
    if open_case is not None:
        raise DisputeAlreadyOpen("This call already has an open dispute.", caseId=open_case)
    return _insert(
        session,
        now=now,
        kind=Kind.DISPUTE.value,
        account_id=account_id,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        statement=reason,
        invocation_id=invocation_id,
    )


def submit_report(
    session: Session,
    *,
    account_id: str,
    idempotency_key: str,
    fingerprint: str,
    service_code: str,
    version: str,
    category: str,
    text: str,
    now: dt.datetime,
) -> CaseView:
    """Report the currently public exact publication `service_code` `version`."""
    if category not in Category.__members__:
        raise InvalidCaseInput(f"category must be one of {', '.join(Category)}.")
    check_text(text, name="text")
    published = catalog.public_version(session, service_code=service_code, version=version)
    return _insert(
        session,
        now=now,
        kind=Kind.CONTENT_REPORT.value,
        account_id=account_id,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        statement=text,
        listing_id=published.listing_id,
        service_code=service_code,
        version=published.label,
        category=category,
    )


# --- decisions ---------------------------------------------------------------------------


def decide(
    session: Session,
    *,
    case_id: str,
    decision: Decision,
    reason: str,
    decided_by: str,
    now: dt.datetime,
) -> CaseView:
    """Record a staff decision on an OPEN case (who, when, why), once.

    Approving schedules the refund at once (`refund_next_attempt_at = now`): the caller tries it
    right after this commits, and the worker takes over if that cannot post.
    """
    check_text(reason, name="reason")
    kind, target = DECISIONS[decision]
    case = get_case(session, case_id=case_id)
    if case.kind != kind:
        raise InvalidCaseTransition(
            f"A {case.kind} case cannot be decided with {decision.value!r}.", state=case.state
        )
    if decided_by in _parties(session, case):
        raise InvalidCaseTransition(
            "A case cannot be decided by the account that submitted it or whose service it "
            "concerns; another staff member must decide it.",
            state=case.state,
        )
    values: dict[str, Any] = {
        "state": target.value,
        "decided_by": decided_by,
        "decided_at": now,
        "decision_reason": reason,
        "updated_at": now,
    }
    if case.state != CaseState.OPEN:
        raise _not_open(case.state)
    if decision is Decision.APPROVE:
        values["refund_next_attempt_at"] = now
    if decision is Decision.UPHOLD:
        # Placed first so the case never shows UPHELD without its hold; if the move below
        # loses a race, the whole transaction (hold included) rolls back.
        assert case.service_code is not None
        values["hold_id"] = catalog.place_hold(
            session,
            service_code=case.service_code,
            kind="report",
            reason=f"content report {case_id} upheld: {reason}"[:TEXT_MAX],
            created_by=decided_by,
            now=now,
            case_id=case_id,
        )
    if not _move(session, case_id, CaseState.OPEN, values):
        raise _not_open(get_case(session, case_id=case_id).state)
    return get_case(session, case_id=case_id)


def _parties(session: Session, case: CaseView) -> set[str]:
    """The accounts a case is about: its submitter and the provider of the service (decision
    0189: none of them may decide it)."""
    service_code = case.service_code
    if service_code is None and case.invocation_id is not None:
        service_code = invocations.get_view(session, invocation_id=case.invocation_id).service_code
    parties = {case.account_id}
    if service_code is not None:
        parties.add(catalog.get_listing(session, service_code=service_code).owner_id)
    return parties


def _not_open(state: str) -> InvalidCaseTransition:
    return InvalidCaseTransition(
        f"The case is {state}; only an OPEN case can be decided.", state=state
    )


def _move(session: Session, case_id: str, expected: CaseState, values: dict[str, Any]) -> bool:
    result = session.execute(
        update(_t).where(_c.id == case_id, _c.state == expected.value).values(**values)
    )
    return cast(CursorResult[Any], result).rowcount == 1


# --- refunds -----------------------------------------------------------------------------


def refund_backoff(attempts: int) -> float:
    """Seconds until the next try after `attempts` blocked ones: doubling, capped at an hour."""
    return min(REFUND_BACKOFF_CAP, REFUND_BACKOFF_BASE * 2.0 ** max(attempts - 1, 0))


def due_refunds(session: Session, *, now: dt.datetime, limit: int) -> list[str]:
    """Approved disputes whose refund try is due, locked for this transaction.

    PostgreSQL: `FOR UPDATE SKIP LOCKED`, so concurrent workers take disjoint cases. SQLite
    (whose compiler leaves the locking clause out) serialises writers; the conditional UPDATEs
    decide anyway.
    """
    query = (
        select(_c.id)
        .where(_c.state == CaseState.APPROVED.value, _c.refund_next_attempt_at <= now)
        .order_by(_c.refund_next_attempt_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list(session.execute(query).scalars())


def attempt_refund(session: Session, *, case_id: str, now: dt.datetime) -> RefundResult:
    """Post the refund of an approved dispute: ledger, receipt and case in this transaction.

    Nothing claims REFUNDED unless the ledger refund posted here (or had already posted).
    """
    # The case row locked (SQLite: BEGIN IMMEDIATE already holds the writer lock).
    query = (
        select(_c.state, _c.invocation_id, _c.refund_attempts)
        .where(_c.id == case_id)
        .with_for_update()
    )
    row = session.execute(query).first()
    if row is None:
        raise CaseNotFound()
    state, invocation_id, attempts = row
    if state != CaseState.APPROVED.value:
        return RefundResult.NOT_DUE
    reservation_id = invocations.reservation_of(session, invocation_id=invocation_id)
    try:
        ledger.refund(session, reservation_id=reservation_id, now=now)
    except ReservationAlreadyRefunded:
        pass  # posted before (the ledger guards it): only the receipt and case may lag
    except RefundBlocked as exc:
        _move(
            session,
            case_id,
            CaseState.APPROVED,
            {
                "refund_attempts": attempts + 1,
                "refund_next_attempt_at": now + dt.timedelta(seconds=refund_backoff(attempts + 1)),
                "refund_last_error": f"{exc.code}: {exc.message}"[:200],
                "updated_at": now,
            },
        )
        return RefundResult.BLOCKED
    except ReservationNotSettled as exc:
        _move(
            session,
            case_id,
            CaseState.APPROVED,
            {
                "refund_attempts": attempts + 1,
                "refund_next_attempt_at": None,
                "refund_last_error": f"{exc.code}: {exc.message}"[:200],
                "updated_at": now,
            },
        )
        return RefundResult.STUCK
    invocations.mark_refunded(session, invocation_id=invocation_id, now=now)
    moved = _move(
        session,
        case_id,
        CaseState.APPROVED,
        {
            "state": CaseState.REFUNDED.value,
            "refunded_at": now,
            "refund_attempts": attempts + 1,
            "refund_next_attempt_at": None,
            "refund_last_error": None,
            "updated_at": now,
        },
    )
    if not moved:  # cannot happen under the row lock; refuse rather than refund twice
        raise InvalidCaseTransition("The case left APPROVED while its refund was posting.")
    return RefundResult.REFUNDED
