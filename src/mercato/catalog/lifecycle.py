"""The review lifecycle of a version (DESIGN §7, decision 0260).

DRAFT → SUBMITTED (bound to its connection's latest run) → APPROVED | CHANGES_REQUESTED (with
staff's reason) → PUBLISHED. An edit after submission returns a version to DRAFT (see
`service.update_draft`). Every step is one `VersionTransition` row with its actor, time and
reason. A refused step raises before anything is written.

Review binds (DESIGN §7, decision 0530): staff never review or publish a version of a listing
their own account owns, and approval and publication cover only the connection revision the
submitted run checked; a connection changed since is a conflict until the provider submits the
version again (which a SUBMITTED or APPROVED version on a stale revision may do).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mercato.catalog.errors import (
    InvalidReviewReason,
    SelfReviewForbidden,
    VersionNotFound,
    VersionStateConflict,
)
from mercato.catalog.models import (
    APPROVED,
    CHANGES_REQUESTED,
    DRAFT,
    PUBLISHED,
    SUBMITTED,
    Listing,
    Version,
    VersionTransition,
)
from mercato.core.ids import new_id
from mercato.providers import service as providers
from mercato.providers.errors import ConformanceNotPassed
from mercato.providers.schemas import RunView

__all__ = [
    "TransitionView",
    "approve",
    "owned_version",
    "passing_run",
    "publish_reviewed",
    "record",
    "request_changes",
    "submit",
    "transitions_of",
]

REASON_MAX = 2000
SUBMITTABLE = (DRAFT, CHANGES_REQUESTED)


@dataclass(frozen=True)
class TransitionView:
    from_state: str | None
    to_state: str
    role: str
    actor_id: str | None
    reason: str
    run_id: str | None
    at: dt.datetime


def record(
    session: Session,
    *,
    version: Version,
    to_state: str,
    role: str,
    actor_id: str | None,
    reason: str,
    now: dt.datetime,
    run_id: str | None = None,
    created: bool = False,
) -> None:
    """Keep one step of `version`'s lifecycle from its current state (none when `created`);
    the caller holds the version's row lock, so the step numbers cannot collide."""
    last = session.scalar(
        select(func.max(VersionTransition.seq)).where(VersionTransition.version_id == version.id)
    )
    session.add(
        VersionTransition(
            id=new_id("vtr"),
            version_id=version.id,
            seq=(last or 0) + 1,
            from_state=None if created else version.state,
            to_state=to_state,
            role=role,
            actor_id=actor_id,
            reason=reason,
            run_id=run_id,
            at=now,
        )
    )


def owned_version(session: Session, *, version_id: str, owner_id: str) -> tuple[Listing, Version]:
    """The version and its listing when `owner_id` owns them; anyone else's is not found."""
    row = session.execute(
        select(Listing, Version)
        .join(Version, Version.listing_id == Listing.id)
        .where(Version.id == version_id)
    ).first()
    if row is None or row[0].owner_id != owner_id:
        raise VersionNotFound("There is no such version.")
    return row[0], row[1]


def _locked(session: Session, version_id: str) -> Version:
    row = session.scalars(select(Version).where(Version.id == version_id).with_for_update()).first()
    if row is None:
        raise VersionNotFound("There is no such version.")
    return row


def _require(row: Version, allowed: tuple[str, ...], step: str) -> None:
    if row.state not in allowed:
        raise VersionStateConflict(
            f"{row.label} is {row.state}; {step} needs it to be {' or '.join(allowed)}.",
            state=row.state,
        )


def _not_own(session: Session, row: Version, actor_id: str) -> Listing:
    """The version's listing, when `actor_id` (staff) does not own it."""
    listing = session.get(Listing, row.listing_id)
    assert listing is not None  # a version's listing is never deleted
    if listing.owner_id == actor_id:
        raise SelfReviewForbidden(
            "You own this listing: another staff member must review and publish its versions."
        )
    return listing


def _connection_changed(session: Session, row: Version) -> bool:
    """Whether the version's connection is no longer on the revision its submitted run checked
    (the connection's row stays locked, so it cannot change before this transaction ends)."""
    current = providers.locked_revision(session, connection_id=row.connection_id)
    if row.submitted_run_id is None:
        return True
    return providers.run_revision(session, run_id=row.submitted_run_id) != current


def _require_unchanged_connection(session: Session, row: Version, step: str) -> None:
    if _connection_changed(session, row):
        raise VersionStateConflict(
            f"The connection of {row.label} changed after it was submitted; {step} needs the "
            "provider to check the connection and submit the version again.",
            state=row.state,
        )


def passing_run(session: Session, *, connection_id: str) -> RunView:
    """The connection's latest run, which must be on its current revision and pass all nine."""
    connection = providers.get_connection(session, connection_id=connection_id)
    run = providers.latest_run(session, connection_id=connection_id)
    if run is None or run.connection_revision != connection.revision:
        raise ConformanceNotPassed(
            "The connection has no conformance run on its current revision: run its check."
        )
    if not run.passed:
        raise ConformanceNotPassed(
            "The connection's latest conformance run did not pass all nine checks: fix the "
            "failing checks and run the check again."
        )
    return run


def submit(session: Session, *, version_id: str, actor_id: str, now: dt.datetime) -> Version:
    """DRAFT (or CHANGES_REQUESTED) → SUBMITTED, bound to the connection's passing latest run;
    a SUBMITTED or APPROVED version whose connection changed since is submitted again."""
    row = _locked(session, version_id)
    resubmission = row.state in (SUBMITTED, APPROVED) and _connection_changed(session, row)
    if not resubmission:
        _require(row, SUBMITTABLE, "submitting")
    run = passing_run(session, connection_id=row.connection_id)
    record(
        session,
        version=row,
        to_state=SUBMITTED,
        role="provider",
        actor_id=actor_id,
        reason="submitted again: the connection changed"
        if resubmission
        else "submitted for review",
        run_id=run.run_id,
        now=now,
    )
    row.state, row.submitted_run_id, row.updated_at = SUBMITTED, run.run_id, now
    session.flush()
    return row


def approve(session: Session, *, version_id: str, actor_id: str, now: dt.datetime) -> Version:
    """SUBMITTED → APPROVED; the connection's revision the version was submitted with (still its
    current one) is approved with it."""
    row = _locked(session, version_id)
    _not_own(session, row, actor_id)
    _require(row, (SUBMITTED,), "approving")
    _require_unchanged_connection(session, row, "approving")
    run = passing_run(session, connection_id=row.connection_id)
    _approve_connection(session, row.connection_id, actor_id, now)
    record(
        session,
        version=row,
        to_state=APPROVED,
        role="staff",
        actor_id=actor_id,
        reason="approved",
        run_id=run.run_id,
        now=now,
    )
    row.state, row.updated_at = APPROVED, now
    session.flush()
    return row


def request_changes(
    session: Session, *, version_id: str, actor_id: str, reason: str, now: dt.datetime
) -> Version:
    """SUBMITTED or APPROVED → CHANGES_REQUESTED, with staff's reason for the provider."""
    reason = reason.strip()
    if not 1 <= len(reason) <= REASON_MAX:
        raise InvalidReviewReason(
            f"Say what to change: a reason of 1 to {REASON_MAX} characters.", field="reason"
        )
    row = _locked(session, version_id)
    _not_own(session, row, actor_id)
    _require(row, (SUBMITTED, APPROVED), "requesting changes")
    record(
        session,
        version=row,
        to_state=CHANGES_REQUESTED,
        role="staff",
        actor_id=actor_id,
        reason=reason,
        now=now,
    )
    row.state, row.updated_at = CHANGES_REQUESTED, now
    session.flush()
    return row


def publish_reviewed(
    session: Session, *, version_id: str, actor_id: str, now: dt.datetime
) -> Version:
    """APPROVED → PUBLISHED, frozen for ever; the connection must still be on the revision the
    version was submitted with, and pass on it."""
    row = _locked(session, version_id)
    listing = _not_own(session, row, actor_id)
    _require(row, (APPROVED,), "publishing")
    _require_unchanged_connection(session, row, "publishing")
    run = passing_run(session, connection_id=row.connection_id)
    _approve_connection(session, row.connection_id, actor_id, now)
    record(
        session,
        version=row,
        to_state=PUBLISHED,
        role="staff",
        actor_id=actor_id,
        reason="published",
        run_id=run.run_id,
        now=now,
    )
    row.display_name = listing.display_name
    row.state, row.published_at, row.updated_at = PUBLISHED, now, now
    session.flush()
    return row


def _approve_connection(
    session: Session, connection_id: str, actor_id: str, now: dt.datetime
) -> None:
    if not providers.is_approved(session, connection_id=connection_id):
        providers.approve_connection(
            session, connection_id=connection_id, now=now, approved_by=actor_id
        )


def transitions_of(session: Session, *, version_id: str) -> list[TransitionView]:
    """The version's lifecycle, oldest step first."""
    rows = session.scalars(
        select(VersionTransition)
        .where(VersionTransition.version_id == version_id)
        .order_by(VersionTransition.seq)
    )
    return [
        TransitionView(r.from_state, r.to_state, r.role, r.actor_id, r.reason, r.run_id, r.at)
        for r in rows
    ]
