"""Catalog services: listings, draft and published versions, holds, public reads."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mercato.catalog import lifecycle
from mercato.catalog.contracts import BuiltContract, build_contract, parse_version_label
from mercato.catalog.errors import (
    ConnectionMismatch,
    ConnectionNotApproved,
    InvalidListing,
    InvalidPrice,
    InvalidServiceCode,
    ListingNotFound,
    ListingUnavailable,
    ServiceCodeTaken,
    VersionImmutable,
    VersionNotFound,
    VersionNumberTaken,
)
from mercato.catalog.holds import (
    active_hold_exists,
    active_holds,
    is_public,
    place_hold,
    public_clause,
    release_hold,
)
from mercato.catalog.models import DRAFT, PUBLISHED, Listing, Version
from mercato.catalog.samples import check_examples
from mercato.catalog.schemas import ConnectionFacts, InvocableVersion, PublishResult
from mercato.catalog.search import match_clause
from mercato.core.errors import ValidationFailed
from mercato.core.ids import new_id

__all__ = [
    "DEFAULT_PROVIDER_SHARE_BPS",
    "INVOCABLE_VERSION",
    "INVOCABLE_VERSION_CONNECTION",
    "INVOCABLE_VERSION_WIDTH",
    "ConnectionFacts",
    "InvocableVersion",
    "PublishResult",
    "active_holds",
    "check_service_code",
    "create_draft",
    "create_listing",
    "get_invocable_version",
    "get_listing",
    "invocable_version_of",
    "invocable_version_params",
    "is_public",
    "place_hold",
    "public_listing",
    "public_listings",
    "public_version",
    "publish",
    "publish_version",
    "release_hold",
    "update_draft",
]

DEFAULT_PROVIDER_SHARE_BPS = 8000
MAX_PRICE = 1_000_000_000
_SERVICE_CODE = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")


# --- listings ---------------------------------------------------------------------------


def check_service_code(service_code: str) -> str:
    """Return `service_code` if it is a lowercase dotted code usable in a URL path."""
    if len(service_code) > 100 or _SERVICE_CODE.fullmatch(service_code) is None:
        raise InvalidServiceCode(
            "A service code is lowercase letters, digits and hyphens in dot-separated "
            f"parts, at most 100 characters (e.g. pixiv.daily-ranking); got {service_code!r}."
        )
    return service_code


def create_listing(
    session: Session,
    *,
    service_code: str,
    display_name: str,
    description: str = "",
    owner_id: str,
    provider_share_bps: int = DEFAULT_PROVIDER_SHARE_BPS,
    now: dt.datetime,
    publisher_name: str | None = None,
) -> Listing:
    """Create a listing owned by a provider account; the service code is taken for ever."""
    check_service_code(service_code)
    _check_listing_fields(display_name, description, provider_share_bps)
    publisher_name = check_publisher_name(publisher_name)
    if _find_listing(session, service_code) is not None:
        raise ServiceCodeTaken(f"The service code {service_code} is already taken.")
    listing = Listing(
        id=new_id("lst"),
        service_code=service_code,
        display_name=display_name,
        description=description,
        publisher_name=publisher_name,
        owner_id=owner_id,
        provider_share_bps=provider_share_bps,
        created_at=now,
    )
    session.add(listing)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError as exc:  # a concurrent publisher took the code first
        raise ServiceCodeTaken(f"The service code {service_code} is already taken.") from exc
    return listing


def get_listing(session: Session, *, service_code: str) -> Listing:
    """Return the listing with this code, public or not."""
    listing = _find_listing(session, service_code)
    if listing is None:
        raise ListingNotFound(f"There is no listing {service_code}.")
    return listing


def _find_listing(session: Session, service_code: str) -> Listing | None:
    return session.scalars(select(Listing).where(Listing.service_code == service_code)).first()


def _check_listing_fields(display_name: str, description: str, share_bps: int) -> None:
    if not display_name.strip() or len(display_name) > 200:
        raise InvalidListing("The display name must be 1 to 200 characters.")
    if len(description) > 10_000:
        raise InvalidListing("The description must be at most 10000 characters.")
    if isinstance(share_bps, bool) or not 0 <= share_bps <= 10_000:
        raise InvalidListing("The provider share is 0 to 10000 basis points.")


def check_publisher_name(name: str | None) -> str | None:
    """The publisher's name as shown to callers: 1-100 characters, trimmed; None or blank: none."""
    if name is None or not name.strip():
        return None
    name = " ".join(name.split())
    if len(name) > 100:
        raise InvalidListing("The publisher name must be at most 100 characters.")
    return name


def set_publisher_name(session: Session, *, listing_id: str, publisher_name: str | None) -> Listing:
    """Name (or un-name, with None) the publisher a listing is shown under."""
    listing = _listing_by_id(session, listing_id)
    listing.publisher_name = check_publisher_name(publisher_name)
    session.flush()
    return listing


# --- versions ---------------------------------------------------------------------------


def create_draft(
    session: Session,
    *,
    listing_id: str,
    version: str,
    connection: ConnectionFacts,
    price: int,
    contract: Any,
    now: dt.datetime,
    role: str = "operator",
    actor_id: str | None = None,
    examples: Any = None,
) -> Version:
    """Create a DRAFT version; its number is taken for ever, whatever happens to the draft."""
    listing = _listing_by_id(session, listing_id)
    number = parse_version_label(version)
    _check_price(price)
    _check_connection_owner(listing, connection)
    built = build_contract(contract, service_code=listing.service_code, version=version)
    checked_examples = check_examples(examples, built.document)
    taken = select(Version.id).where(Version.listing_id == listing.id, Version.number == number)
    if session.scalars(taken).first() is not None:
        raise VersionNumberTaken(f"{listing.service_code} {version} already exists.")
    row = Version(
        id=new_id("ver"),
        listing_id=listing.id,
        number=number,
        label=version,
        state=DRAFT,
        display_name=listing.display_name,
        connection_id=connection.connection_id,
        price=price,
        examples=checked_examples,
        created_at=now,
        updated_at=now,
        published_at=None,
    )
    _apply_contract(row, built)
    session.add(row)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError as exc:  # a concurrent draft took the number first
        raise VersionNumberTaken(f"{listing.service_code} {version} already exists.") from exc
    lifecycle.record(
        session,
        version=row,
        to_state=DRAFT,
        role=role,
        actor_id=actor_id,
        reason="draft created",
        now=now,
        created=True,
    )
    session.flush()
    return row


def update_draft(
    session: Session,
    *,
    version_id: str,
    connection: ConnectionFacts | None = None,
    price: int | None = None,
    contract: Any = None,
    now: dt.datetime,
    role: str = "operator",
    actor_id: str | None = None,
    examples: Any = None,
) -> Version:
    """Change an unpublished version's connection, price, contract or examples; a real change after
    submission returns it to DRAFT. A published version refuses."""
    row = _version_for_update(session, version_id)
    if row.state == PUBLISHED:
        raise VersionImmutable(f"{row.label} is published and cannot change.")
    listing = _listing_by_id(session, row.listing_id)
    before = (row.connection_id, row.price, row.contract, row.examples)
    if connection is not None:
        _check_connection_owner(listing, connection)
        row.connection_id = connection.connection_id
    if price is not None:
        _check_price(price)
        row.price = price
    if contract is not None:
        _apply_contract(
            row, build_contract(contract, service_code=listing.service_code, version=row.label)
        )
    if examples is not None:
        row.examples = check_examples(examples, row.contract)
    elif contract is not None and row.examples is not None:
        row.examples = check_examples(row.examples, row.contract)  # still true of the new one?
    if before == (row.connection_id, row.price, row.contract, row.examples):
        return row  # nothing changed: a submitted version stays where it is
    if row.state != DRAFT:
        lifecycle.record(
            session,
            version=row,
            to_state=DRAFT,
            role=role,
            actor_id=actor_id,
            reason=f"edited while {row.state}",
            now=now,
        )
        row.state, row.submitted_run_id = DRAFT, None
    row.updated_at = now
    session.flush()
    return row


def publish_version(
    session: Session,
    *,
    version_id: str,
    connection: ConnectionFacts,
    now: dt.datetime,
    role: str = "operator",
    actor_id: str | None = None,
) -> Version:
    """Freeze an unpublished version for ever, outside review (the operator's one-step
    `publish`); its connection must be approved now."""
    row = _version_for_update(session, version_id)
    if row.state == PUBLISHED:
        return row
    if connection.connection_id != row.connection_id:
        raise ConnectionMismatch("The facts given are not about the version's connection.")
    if not connection.approved:
        raise ConnectionNotApproved(
            "The version's provider connection must pass the conformance check and be "
            "approved before publishing."
        )
    listing = _listing_by_id(session, row.listing_id)
    _check_connection_owner(listing, connection)
    lifecycle.record(
        session,
        version=row,
        to_state=PUBLISHED,
        role=role,
        actor_id=actor_id,
        reason="published by the operator",
        now=now,
    )
    row.display_name = listing.display_name
    row.state = PUBLISHED
    row.published_at = now
    row.updated_at = now
    session.flush()
    return row


def publish(
    session: Session,
    *,
    service_code: str,
    display_name: str,
    version: str,
    connection: ConnectionFacts,
    price: int,
    contract: Any,
    now: dt.datetime,
    description: str | None = None,
    provider_share_bps: int | None = None,
    examples: Any = None,
    publisher_name: str | None = None,
) -> PublishResult:
    """Create the listing if needed, draft the version and publish it, in one step.

    Re-publishing an identical version (display name, connection, price and contract) is a
    no-op success; any difference is refused with VERSION_IMMUTABLE. A `publisher_name` given
    names the listing's publisher (None keeps the one it has).
    """
    parse_version_label(version)  # refuse a bad label before anything is written
    listing = _find_listing(session, service_code)
    if listing is None:
        listing = create_listing(
            session,
            service_code=service_code,
            display_name=display_name,
            description=description or "",
            owner_id=connection.owner_id,
            provider_share_bps=(
                DEFAULT_PROVIDER_SHARE_BPS if provider_share_bps is None else provider_share_bps
            ),
            now=now,
            publisher_name=publisher_name,
        )
    elif publisher_name is not None:
        _check_connection_owner(listing, connection)
        listing.publisher_name = check_publisher_name(publisher_name)
    existing = _version_by_label(session, listing.id, version)
    if existing is not None and existing.state == PUBLISHED:
        built = build_contract(contract, service_code=service_code, version=version)
        if not _same_publication(existing, built, display_name, connection, price):
            raise VersionImmutable(
                f"{service_code} {version} is published and cannot change; publish a new version."
            )
        return PublishResult(listing=listing, version=existing, created=False)
    _update_listing(listing, display_name, description, provider_share_bps, connection)
    if existing is None:
        draft = create_draft(
            session,
            listing_id=listing.id,
            version=version,
            connection=connection,
            price=price,
            contract=contract,
            now=now,
            examples=examples,
        )
    else:
        draft = update_draft(
            session,
            version_id=existing.id,
            connection=connection,
            price=price,
            contract=contract,
            now=now,
            examples=examples,
        )
    published = publish_version(session, version_id=draft.id, connection=connection, now=now)
    return PublishResult(listing=listing, version=published, created=True)


def _update_listing(
    listing: Listing,
    display_name: str,
    description: str | None,
    share_bps: int | None,
    connection: ConnectionFacts,
) -> None:
    _check_connection_owner(listing, connection)
    new_description = listing.description if description is None else description
    new_share = listing.provider_share_bps if share_bps is None else share_bps
    _check_listing_fields(display_name, new_description, new_share)
    listing.display_name = display_name
    listing.description = new_description
    listing.provider_share_bps = new_share


def _same_publication(
    row: Version, built: BuiltContract, display_name: str, connection: ConnectionFacts, price: int
) -> bool:
    return (
        row.contract == built.stored()
        and row.price == price
        and row.connection_id == connection.connection_id
        and row.display_name == display_name
    )


def _apply_contract(row: Version, built: BuiltContract) -> None:
    row.contract = built.stored()
    row.contract_digest = built.contract_digest
    row.has_artifact_contract = built.has_artifact_contract


def _check_price(price: int) -> None:
    if isinstance(price, bool) or not isinstance(price, int) or not 1 <= price <= MAX_PRICE:
        raise InvalidPrice(f"A price is a whole number of points from 1 to {MAX_PRICE}.")


def _check_connection_owner(listing: Listing, connection: ConnectionFacts) -> None:
    if connection.owner_id != listing.owner_id:
        raise ConnectionMismatch(
            "A version must be bound to a connection owned by the listing's owner."
        )


def _listing_by_id(session: Session, listing_id: str) -> Listing:
    listing = session.get(Listing, listing_id)
    if listing is None:
        raise ListingNotFound("There is no such listing.")
    return listing


def _version_for_update(session: Session, version_id: str) -> Version:
    query = select(Version).where(Version.id == version_id).with_for_update()
    row = session.scalars(query).first()
    if row is None:
        raise VersionNotFound("There is no such version.")
    return row


def _version_by_label(session: Session, listing_id: str, label: str) -> Version | None:
    number = parse_version_label(label)
    query = select(Version).where(Version.listing_id == listing_id, Version.number == number)
    return session.scalars(query).first()


# --- reads ------------------------------------------------------------------------------


# Every invoke runs it (built once): the exact published version, its listing, and whether
# any hold is active, in one round trip.
_PUBLISHED_VERSION = (
    select(Listing, Version, active_hold_exists().label("held"))
    .join(Version, Version.listing_id == Listing.id)
    .where(
        Listing.service_code == bindparam("service_code"),
        Version.number == bindparam("number"),
        Version.state == PUBLISHED,
    )
)


# Every invoke runs it (built once): the columns invoke needs of the exact published version
# and its listing, and whether any hold is active, in one round trip; a Core statement on the
# tables' columns, which skips the ORM's execution path.
_versions, _listings = Version.__table__.c, Listing.__table__.c
INVOCABLE_VERSION = (
    select(
        _versions.id,
        _listings.id,
        _listings.service_code,
        _versions.label,
        _versions.price,
        _versions.contract,
        _versions.contract_digest,
        _versions.has_artifact_contract,
        _versions.connection_id,
        _listings.owner_id,
        _listings.provider_share_bps,
        active_hold_exists().label("held"),
    )
    .select_from(Listing.__table__.join(Version.__table__, _versions.listing_id == _listings.id))
    .where(
        _listings.service_code == bindparam("service_code"),
        _versions.number == bindparam("number"),
        _versions.state == PUBLISHED,
    )
)


def get_invocable_version(session: Session, *, service_code: str, version: str) -> InvocableVersion:
    """The exact published version to invoke; a held listing is unavailable."""
    params = invocable_version_params(service_code=service_code, version=version)
    found = None if params is None else session.execute(INVOCABLE_VERSION, params).first()
    return invocable_version_of(
        None if found is None else tuple(found), service_code=service_code, version=version
    )


# For callers that read more with the version in the same round trip (the invoke adds the
# dispatch target and the quota policy): the connection id column to join on, and how many
# leading columns `invocable_version_of` reads.
INVOCABLE_VERSION_CONNECTION = _versions.connection_id
INVOCABLE_VERSION_WIDTH = len(INVOCABLE_VERSION.selected_columns)


def invocable_version_params(*, service_code: str, version: str) -> dict[str, Any] | None:
    """The parameters of `INVOCABLE_VERSION`, or None when `version` names no exact version."""
    number = _version_number(version)
    return None if number is None else {"service_code": service_code, "number": number}


def invocable_version_of(
    values: tuple[Any, ...] | None, *, service_code: str, version: str
) -> InvocableVersion:
    """The version from the first `INVOCABLE_VERSION_WIDTH` columns of a row of
    `INVOCABLE_VERSION` (None: there was no row); a held listing is unavailable."""
    if values is None:
        raise VersionNotFound(f"{service_code} has no published version {version}.")
    (
        version_id,
        listing_id,
        listed_code,
        label,
        price,
        stored_contract,
        contract_digest,
        has_artifact_contract,
        connection_id,
        owner_id,
        provider_share_bps,
        held,
    ) = values[:INVOCABLE_VERSION_WIDTH]
    if held:
        raise ListingUnavailable(f"{service_code} is not available.")
    contract = dict(stored_contract)
    return InvocableVersion(
        version_id=version_id,
        listing_id=listing_id,
        service_code=listed_code,
        version=label,
        price=price,
        contract=contract,
        contract_digest=contract_digest,
        request_max_bytes=int(contract["requestMaxBytes"]),
        response_max_bytes=int(contract["responseMaxBytes"]),
        has_artifact_contract=has_artifact_contract,
        connection_id=connection_id,
        provider_account_id=owner_id,
        provider_share_bps=provider_share_bps,
    )


def _version_number(label: str) -> int | None:
    try:
        return parse_version_label(label)
    except ValidationFailed:
        return None  # `latest` and other aliases are simply not versions


def _published_version(
    session: Session, service_code: str, label: str
) -> tuple[Listing, Version, bool] | None:
    """The exact published version, its listing, and whether a hold is active on it."""
    number = _version_number(label)
    if number is None:
        return None
    params = {"service_code": service_code, "number": number}
    row = session.execute(_PUBLISHED_VERSION, params).first()
    return None if row is None else (row[0], row[1], bool(row[2]))


def public_listings(
    session: Session, *, limit: int, after: str | None = None, terms: list[str] | None = None
) -> tuple[list[tuple[Listing, list[Version]]], bool]:
    """One page of public listings by service code matching every search term (see
    `catalog.search`), and whether more follow."""
    query = select(Listing).where(public_clause()).order_by(Listing.service_code)
    if terms:
        query = query.where(match_clause(terms))
    if after is not None:
        query = query.where(Listing.service_code > after)
    rows = list(session.scalars(query.limit(limit + 1)))
    more = len(rows) > limit
    listings = rows[:limit]
    versions = _published_versions(session, [listing.id for listing in listings])
    return [(listing, versions.get(listing.id, [])) for listing in listings], more


def public_listing(session: Session, *, service_code: str) -> tuple[Listing, list[Version]]:
    """A public listing and its published versions; anything else is not found."""
    listing = _find_listing(session, service_code)
    if listing is None or not is_public(session, listing_id=listing.id):
        raise ListingNotFound(f"There is no listing {service_code}.")
    return listing, _published_versions(session, [listing.id]).get(listing.id, [])


def public_version(session: Session, *, service_code: str, version: str) -> Version:
    """One exact published version of a public listing."""
    listing, _ = public_listing(session, service_code=service_code)
    found = _published_version(session, service_code, version)
    if found is None:
        raise VersionNotFound(f"{listing.service_code} has no published version {version}.")
    return found[1]


def _published_versions(session: Session, listing_ids: list[str]) -> dict[str, list[Version]]:
    if not listing_ids:
        return {}
    query = (
        select(Version)
        .where(Version.listing_id.in_(listing_ids), Version.state == PUBLISHED)
        .order_by(Version.listing_id, Version.number)
    )
    grouped: dict[str, list[Version]] = {}
    for row in session.scalars(query):
        grouped.setdefault(row.listing_id, []).append(row)
    return grouped
