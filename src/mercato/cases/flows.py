"""Case flows with their transactions: submit (idempotent), decide, refund.

A submission is one transaction: replay by (account, Idempotency-Key) first, then the checks
and the insert. Two concurrent submissions with one key race on the unique constraint; the
loser's transaction rolls back and it answers as the winner's replay. Every submission, API or
page, passes the one Idempotency-Key rule here first (DESIGN §3 step 2, §9; decision 0531): a
missing or malformed key opens nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mercato.cases import service as cases
from mercato.cases.errors import DisputeAlreadyOpen
from mercato.cases.schemas import CaseView, Decision, Kind, Submitted
from mercato.db.runtime import Runtime
from mercato.invocations import service as invocations

log = logging.getLogger("mercato.cases")

Create = Callable[[Session, str], CaseView]
"""Checks and inserts a new case given its fingerprint (the service's open_dispute etc.)."""


def _submit(
    runtime: Runtime,
    *,
    account_id: str,
    idempotency_key: str,
    kind: Kind,
    body: dict[str, object],
    create: Create,
) -> Submitted:
    invocations.check_idempotency_key([idempotency_key])
    fingerprint = cases.fingerprint_of(kind, dict(body))
    for _ in range(2):
        try:
            with runtime.db.transaction() as session:
                existing = cases.find_by_key(
                    session, account_id=account_id, idempotency_key=idempotency_key
                )
                if existing is not None:
                    return Submitted(case=cases.replay(existing, fingerprint), created=False)
                return Submitted(case=create(session, fingerprint), created=True)
        except IntegrityError:
            # A concurrent twin won a unique constraint (same key, or the invocation's one
            # open dispute): go round once more, now seeing its committed row.
            log.info("case submission raced a concurrent one; re-reading")
        except DisputeAlreadyOpen:
            # The open dispute may be this very submission's twin, committed between our key
            # lookup and the check: then this is a replay, not a conflict.
            twin = _find(runtime, account_id=account_id, idempotency_key=idempotency_key)
            if twin is None:
                raise
            return Submitted(case=cases.replay(twin, fingerprint), created=False)
    raise RuntimeError("case submission kept conflicting")  # pragma: no cover


def _find(runtime: Runtime, *, account_id: str, idempotency_key: str) -> CaseView | None:
    with runtime.db.read() as session:
        return cases.find_by_key(session, account_id=account_id, idempotency_key=idempotency_key)


def submit_dispute(
    runtime: Runtime, *, account_id: str, idempotency_key: str, invocation_id: str, reason: str
) -> Submitted:
    """Open (or replay) a dispute on the account's own settled session call."""
    now = runtime.clock.now()
    return _submit(
        runtime,
        account_id=account_id,
        idempotency_key=idempotency_key,
        kind=Kind.DISPUTE,
        body={"invocationId": invocation_id, "reason": reason},
        create=lambda session, fingerprint: cases.open_dispute(
            session,
            account_id=account_id,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            invocation_id=invocation_id,
            reason=reason,
            now=now,
        ),
    )


def submit_report(
    runtime: Runtime,
    *,
    account_id: str,
    idempotency_key: str,
    service_code: str,
    version: str,
    category: str,
    text: str,
) -> Submitted:
    """Submit (or replay) a content report on a currently public exact publication."""
    now = runtime.clock.now()
    return _submit(
        runtime,
        account_id=account_id,
        idempotency_key=idempotency_key,
        kind=Kind.CONTENT_REPORT,
        body={"serviceCode": service_code, "version": version, "category": category, "text": text},
        create=lambda session, fingerprint: cases.submit_report(
            session,
            account_id=account_id,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            service_code=service_code,
            version=version,
            category=category,
            text=text,
            now=now,
        ),
    )


def decide(
    runtime: Runtime, *, case_id: str, decision: Decision, reason: str, decided_by: str
) -> CaseView:
    """Record a staff decision; an approval then tries its refund in a second transaction."""
    with runtime.db.transaction() as session:
        decided = cases.decide(
            session,
            case_id=case_id,
            decision=decision,
            reason=reason,
            decided_by=decided_by,
            now=runtime.clock.now(),
        )
    if decision is not Decision.APPROVE:
        return decided
    # The approval is committed (with its refund due now) before the refund is tried: if this
    # process dies here, the worker still finds it.
    try_refund(runtime, case_id=case_id)
    with runtime.db.read() as session:
        return cases.get_case(session, case_id=case_id)


def try_refund(runtime: Runtime, *, case_id: str) -> cases.RefundResult:
    """Try to post one approved dispute's refund in its own transaction."""
    with runtime.db.transaction() as session:
        result = cases.attempt_refund(session, case_id=case_id, now=runtime.clock.now())
    if result is not cases.RefundResult.REFUNDED:
        log.info("case %s: refund %s", case_id, result.value)
    return result
