"""The provider API and staff review (DESIGN §7): sessions only; API keys get 403.

Every object is looked up with its owner: another provider's connection, listing or version is
404. The web pages call the same services (`conformance.flows`, `catalog.service`,
`catalog.lifecycle`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session
from starlette.responses import JSONResponse

from mercato.accounts.errors import SessionRequired, StaffRequired
from mercato.accounts.schemas import Principal
from mercato.catalog import lifecycle
from mercato.catalog import service as catalog
from mercato.catalog.contract_schema import CONTRACT_SCHEMA
from mercato.catalog.errors import (
    InvalidContract,
    InvalidExample,
    InvalidListing,
    InvalidPrice,
    InvalidReviewReason,
    InvalidServiceCode,
    InvalidVersionLabel,
    ListingNotFound,
    SelfReviewForbidden,
    ServiceCodeTaken,
    VersionImmutable,
    VersionNotFound,
    VersionNumberTaken,
    VersionStateConflict,
)
from mercato.catalog.models import Listing, Version
from mercato.catalog.schemas import ConnectionFacts
from mercato.conformance import flows as conformance
from mercato.core.errors import Unauthenticated
from mercato.invocations.errors import RequestTooLarge
from mercato.providers import service as providers
from mercato.providers.errors import (
    ConformanceNotPassed,
    ConnectionNameTaken,
    ConnectionNotFound,
    InvalidConnection,
    ProviderAddressForbidden,
)
from mercato.providers.models import ProviderConnection
from mercato.web.api.invocations import provider_client
from mercato.web.api.provider_models import (
    ConnectionBody,
    ConnectionChange,
    ConnectionList,
    ConnectionOut,
    ContractSchemaOut,
    ListingBody,
    ListingChange,
    ListingList,
    ListingOut,
    ReasonBody,
    VersionBody,
    VersionChange,
    VersionOut,
)
from mercato.web.deps import runtime_of, session_principal, staff_principal
from mercato.web.pages import queries
from mercato.web.problems import InvalidRequest, declare

router = APIRouter(tags=["provider"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]
StaffPrincipal = Annotated[Principal, Depends(staff_principal)]

_SESSION = (InvalidRequest, Unauthenticated, SessionRequired)
_BODY = (RequestTooLarge,)  # bodies over the edge's cap (web/limits.py, decision 0180)
_STAFF = (*_SESSION, StaffRequired)
_CONNECTION_INPUT = (InvalidConnection, ProviderAddressForbidden, ConnectionNameTaken)
_VERSION_INPUT = (
    InvalidContract,
    InvalidExample,
    InvalidPrice,
    InvalidVersionLabel,
    ConnectionNotFound,
)
_REVIEW = (SelfReviewForbidden, VersionNotFound, VersionStateConflict, ConformanceNotPassed)


# --- the contract's own schema -----------------------------------------------------------


@router.get(
    "/v1/schemas/contract",
    response_model=ContractSchemaOut,
    **declare(auth=False),
)
def contract_schema() -> JSONResponse:
    """The JSON Schema (2020-12) of the contract document a provider writes."""
    return JSONResponse(CONTRACT_SCHEMA)


# --- connections -------------------------------------------------------------------------


def _own_connection(
    session: Session, principal: Principal, connection_id: str
) -> ProviderConnection:
    connection = providers.get_connection(session, connection_id=connection_id)
    if connection.owner_id != principal.account_id:
        raise ConnectionNotFound()
    return connection


def _connection_out(session: Session, connection: ProviderConnection) -> ConnectionOut:
    return ConnectionOut.of(connection, providers.latest_run(session, connection_id=connection.id))


def _read_connection(request: Request, principal: Principal, connection_id: str) -> ConnectionOut:
    with runtime_of(request).db.read() as session:
        return _connection_out(session, _own_connection(session, principal, connection_id))


@router.post(
    "/v1/provider/connections",
    status_code=201,
    response_model=ConnectionOut,
    **declare(*_SESSION, *_CONNECTION_INPUT, *_BODY),
)
def create_connection(
    body: ConnectionBody, request: Request, principal: SessionPrincipal
) -> ConnectionOut:
    """Register a connection; its nine checks run at once (see `latestRun`)."""
    submitted = conformance.submit_connection(
        runtime_of(request),
        provider_client(request),
        owner_id=principal.account_id,
        name=body.name,
        base_url=body.baseUrl,
        credential=body.credential,
    )
    return _read_connection(request, principal, submitted.connection_id)


@router.get("/v1/provider/connections", response_model=ConnectionList, **declare(*_SESSION))
def list_connections(request: Request, principal: SessionPrincipal) -> ConnectionList:
    with runtime_of(request).db.read() as session:
        rows = queries.connections_of(session, owner_id=principal.account_id)
        return ConnectionList(items=[_connection_out(session, c) for c in rows])


@router.get(
    "/v1/provider/connections/{connection_id}",
    response_model=ConnectionOut,
    **declare(*_SESSION, ConnectionNotFound, path_params=True),
)
def get_connection(
    connection_id: str, request: Request, principal: SessionPrincipal
) -> ConnectionOut:
    return _read_connection(request, principal, connection_id)


@router.patch(
    "/v1/provider/connections/{connection_id}",
    response_model=ConnectionOut,
    **declare(*_SESSION, ConnectionNotFound, InvalidConnection, *_BODY, path_params=True),
)
def change_connection(
    connection_id: str, body: ConnectionChange, request: Request, principal: SessionPrincipal
) -> ConnectionOut:
    """Set the connection's own `maxInFlight` (null: the default); approval is kept."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        _own_connection(session, principal, connection_id)
        connection = providers.set_max_in_flight(
            session,
            connection_id=connection_id,
            max_in_flight=body.maxInFlight,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
        return _connection_out(session, connection)


@router.post(
    "/v1/provider/connections/{connection_id}:check",
    response_model=ConnectionOut,
    **declare(*_SESSION, ConnectionNotFound, path_params=True),
)
def check_connection(
    connection_id: str, request: Request, principal: SessionPrincipal
) -> ConnectionOut:
    """Run the nine checks on the connection's current revision now."""
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        _own_connection(session, principal, connection_id)
    conformance.check_connection(runtime, provider_client(request), connection_id=connection_id)
    return _read_connection(request, principal, connection_id)


# --- listings and versions ---------------------------------------------------------------


def _own_listing(session: Session, principal: Principal, service_code: str) -> Listing:
    listing = catalog.get_listing(session, service_code=service_code)
    if listing.owner_id != principal.account_id:
        raise ListingNotFound(f"There is no listing {service_code}.")
    return listing


def _listing_out(session: Session, listing: Listing) -> ListingOut:
    return ListingOut.of(listing, queries.versions_of(session, listing_id=listing.id))


@router.post(
    "/v1/provider/listings",
    status_code=201,
    response_model=ListingOut,
    **declare(*_SESSION, InvalidServiceCode, InvalidListing, ServiceCodeTaken, *_BODY),
)
def create_listing(body: ListingBody, request: Request, principal: SessionPrincipal) -> ListingOut:
    """Create a listing; its service code is yours for ever."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session,
            service_code=body.serviceCode,
            display_name=body.displayName,
            description=body.description,
            owner_id=principal.account_id,
            now=runtime.clock.now(),
            publisher_name=body.publisherName,
        )
        return _listing_out(session, listing)


@router.put(
    "/v1/provider/listings/{service_code}",
    response_model=ListingOut,
    **declare(*_SESSION, InvalidListing, ListingNotFound, *_BODY, path_params=True),
)
def change_listing(
    service_code: str, body: ListingChange, request: Request, principal: SessionPrincipal
) -> ListingOut:
    """Name the publisher callers see on your listing (null or blank: no name)."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        listing = _own_listing(session, principal, service_code)
        catalog.set_publisher_name(
            session, listing_id=listing.id, publisher_name=body.publisherName
        )
        return _listing_out(session, listing)


@router.get("/v1/provider/listings", response_model=ListingList, **declare(*_SESSION))
def list_listings(request: Request, principal: SessionPrincipal) -> ListingList:
    with runtime_of(request).db.read() as session:
        rows = queries.listings_of(session, owner_id=principal.account_id)
        return ListingList(items=[_listing_out(session, listing) for listing in rows])


@router.get(
    "/v1/provider/listings/{service_code}/versions",
    response_model=ListingOut,
    **declare(*_SESSION, ListingNotFound, path_params=True),
)
def get_listing(service_code: str, request: Request, principal: SessionPrincipal) -> ListingOut:
    """The listing with all its versions, in every state."""
    with runtime_of(request).db.read() as session:
        return _listing_out(session, _own_listing(session, principal, service_code))


def _facts(session: Session, principal: Principal, connection_id: str) -> ConnectionFacts:
    connection = _own_connection(session, principal, connection_id)
    return ConnectionFacts(
        connection_id=connection.id, owner_id=connection.owner_id, approved=connection.approved
    )


def _version_out(session: Session, listing: Listing, version: Version) -> VersionOut:
    steps = lifecycle.transitions_of(session, version_id=version.id)
    earned = queries.version_earned(session, version_id=version.id, provider_id=listing.owner_id)
    return VersionOut.of(listing, version, steps, earned)


@router.post(
    "/v1/provider/listings/{service_code}/versions",
    status_code=201,
    response_model=VersionOut,
    **declare(
        *_SESSION, *_VERSION_INPUT, ListingNotFound, VersionNumberTaken, *_BODY, path_params=True
    ),
)
def create_version(
    service_code: str, body: VersionBody, request: Request, principal: SessionPrincipal
) -> VersionOut:
    """Create a DRAFT version of your listing."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        listing = _own_listing(session, principal, service_code)
        version = catalog.create_draft(
            session,
            listing_id=listing.id,
            version=body.version,
            connection=_facts(session, principal, body.connectionId),
            price=body.price,
            contract=body.contract,
            now=runtime.clock.now(),
            role="provider",
            actor_id=principal.account_id,
            examples=body.examples,
        )
        return _version_out(session, listing, version)


@router.get(
    "/v1/provider/versions/{version_id}",
    response_model=VersionOut,
    **declare(*_SESSION, VersionNotFound, path_params=True),
)
def get_version(version_id: str, request: Request, principal: SessionPrincipal) -> VersionOut:
    """The version with its state, every step of its lifecycle and what a call pays you."""
    with runtime_of(request).db.read() as session:
        listing, version = lifecycle.owned_version(
            session, version_id=version_id, owner_id=principal.account_id
        )
        return _version_out(session, listing, version)


@router.put(
    "/v1/provider/versions/{version_id}",
    response_model=VersionOut,
    **declare(
        *_SESSION, *_VERSION_INPUT, VersionNotFound, VersionImmutable, *_BODY, path_params=True
    ),
)
def change_version(
    version_id: str, body: VersionChange, request: Request, principal: SessionPrincipal
) -> VersionOut:
    """Change an unpublished version; a real change after submission returns it to DRAFT."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        listing, _ = lifecycle.owned_version(
            session, version_id=version_id, owner_id=principal.account_id
        )
        facts = None if body.connectionId is None else _facts(session, principal, body.connectionId)
        version = catalog.update_draft(
            session,
            version_id=version_id,
            connection=facts,
            price=body.price,
            contract=body.contract,
            now=runtime.clock.now(),
            role="provider",
            actor_id=principal.account_id,
            examples=body.examples,
        )
        return _version_out(session, listing, version)


@router.post(
    "/v1/provider/versions/{version_id}:submit",
    response_model=VersionOut,
    **declare(*_SESSION, *_REVIEW, path_params=True),
)
def submit_version(version_id: str, request: Request, principal: SessionPrincipal) -> VersionOut:
    """DRAFT or CHANGES_REQUESTED → SUBMITTED, bound to the connection's passing latest run."""
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        listing, _ = lifecycle.owned_version(
            session, version_id=version_id, owner_id=principal.account_id
        )
        version = lifecycle.submit(
            session, version_id=version_id, actor_id=principal.account_id, now=runtime.clock.now()
        )
        return _version_out(session, listing, version)


# --- staff review ------------------------------------------------------------------------


def _reviewed(request: Request, version_id: str, step: Any, **kwargs: Any) -> VersionOut:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        found = queries.version(session, version_id=version_id)
        version = step(session, version_id=version_id, now=runtime.clock.now(), **kwargs)
        assert found is not None  # the step raised VERSION_NOT_FOUND otherwise
        return _version_out(session, found[0], version)


@router.post(
    "/v1/staff/versions/{version_id}:approve",
    response_model=VersionOut,
    **declare(*_STAFF, *_REVIEW, path_params=True),
)
def approve_version(version_id: str, request: Request, principal: StaffPrincipal) -> VersionOut:
    """SUBMITTED → APPROVED (with the connection revision it was submitted with, still current)."""
    return _reviewed(request, version_id, lifecycle.approve, actor_id=principal.account_id)


@router.post(
    "/v1/staff/versions/{version_id}:request-changes",
    response_model=VersionOut,
    **declare(
        *_STAFF,
        SelfReviewForbidden,
        VersionNotFound,
        VersionStateConflict,
        InvalidReviewReason,
        *_BODY,
        path_params=True,
    ),
)
def request_changes(
    version_id: str, body: ReasonBody, request: Request, principal: StaffPrincipal
) -> VersionOut:
    """SUBMITTED or APPROVED → CHANGES_REQUESTED, with the reason the provider will read."""
    return _reviewed(
        request,
        version_id,
        lifecycle.request_changes,
        actor_id=principal.account_id,
        reason=body.reason,
    )


@router.post(
    "/v1/staff/versions/{version_id}:publish",
    response_model=VersionOut,
    **declare(*_STAFF, *_REVIEW, path_params=True),
)
def publish_version(version_id: str, request: Request, principal: StaffPrincipal) -> VersionOut:
    """APPROVED → PUBLISHED: contract, price and connection are frozen for ever."""
    return _reviewed(request, version_id, lifecycle.publish_reviewed, actor_id=principal.account_id)
