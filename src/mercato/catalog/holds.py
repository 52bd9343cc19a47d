"""Holds: the reasons a listing is out of the catalog; released, never deleted."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from mercato.catalog.errors import HoldAlreadyReleased, HoldNotFound, ListingNotFound
from mercato.catalog.models import HOLD_KINDS, PUBLISHED, Hold, Listing, Version
from mercato.core.errors import ValidationFailed
from mercato.core.ids import new_id


def place_hold(
    session: Session,
    *,
    service_code: str,
    kind: str,
    reason: str,
    created_by: str,
    now: dt.datetime,
    case_id: str | None = None,
) -> str:
    """Take a listing out of the catalog until this hold (and every other) is released."""
    if kind not in HOLD_KINDS:
        raise ValidationFailed(f"A hold's kind is one of {', '.join(HOLD_KINDS)}.")
    if not reason.strip() or len(reason) > 2000:
        raise ValidationFailed("A hold needs a reason of 1 to 2000 characters.")
    listing = session.scalars(select(Listing).where(Listing.service_code == service_code)).first()
    if listing is None:
        raise ListingNotFound(f"There is no listing {service_code}.")
    hold = Hold(
        id=new_id("hold"),
        listing_id=listing.id,
        kind=kind,
        reason=reason,
        created_by=created_by,
        created_at=now,
        case_id=case_id,
    )
    session.add(hold)
    session.flush()
    return hold.id


def release_hold(session: Session, *, hold_id: str, released_by: str, now: dt.datetime) -> None:
    """Release one hold; the listing returns only when no other hold is active."""
    query = select(Hold).where(Hold.id == hold_id).with_for_update()
    hold = session.scalars(query).first()
    if hold is None:
        raise HoldNotFound(f"There is no hold {hold_id}.")
    if hold.released_at is not None:
        raise HoldAlreadyReleased(f"The hold {hold_id} was already released.")
    hold.released_at = now
    hold.released_by = released_by
    session.flush()


def active_holds(session: Session, *, listing_id: str) -> list[Hold]:
    """The listing's holds that are not released, oldest first."""
    query = (
        select(Hold)
        .where(Hold.listing_id == listing_id, Hold.released_at.is_(None))
        .order_by(Hold.created_at, Hold.id)
    )
    return list(session.scalars(query))


def is_public(session: Session, *, listing_id: str) -> bool:
    """A listing is public when it has a published version and no active hold."""
    query = select(Listing.id).where(Listing.id == listing_id, public_clause())
    return session.scalars(query).first() is not None


def active_hold_exists() -> Any:
    """`EXISTS` an unreleased hold on the listing of the enclosing query. On the tables' columns,
    so it serves ORM queries and Core statements (which skip the ORM's execution path) alike."""
    holds, listings = Hold.__table__.c, Listing.__table__.c
    return exists().where(holds.listing_id == listings.id, holds.released_at.is_(None))


def public_clause() -> Any:
    published = exists().where(Version.listing_id == Listing.id, Version.state == PUBLISHED)
    return published & ~active_hold_exists()
