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

from mercato.accounts.schemas import Principal
from mercato.catalog import lifecycle
from mercato.catalog import service as catalog
from mercato.catalog.contract_schema import CONTRACT_SCHEMA
from mercato.catalog.errors import ListingNotFound
from mercato.catalog.models import Listing, Version
from mercato.catalog.schemas import ConnectionFacts
from mercato.conformance import flows as conformance
from mercato.providers import service as providers
from mercato.providers.errors import ConnectionNotFound
from mercato.providers.models import ProviderConnection
from mercato.web.api.invocations import provider_client
from mercato.web.api.provider_models import (
    ConnectionBody,
    ConnectionList,
    ConnectionOut,
    ContractSchemaOut,
    ListingBody,
    ListingList,
    ListingOut,
    ReasonBody,
    VersionBody,
    VersionChange,
    VersionOut,
)
from mercato.web.deps import runtime_of, session_principal, staff_principal
from mercato.web.openapi import problems
from mercato.web.pages import queries

router = APIRouter(tags=["provider"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]
StaffPrincipal = Annotated[Principal, Depends(staff_principal)]

_SESSION = ("INVALID_REQUEST", "UNAUTHENTICATED", "SESSION_REQUIRED")
_BODY = ("REQUEST_TOO_LARGE",)  # bodies over the edge's cap (web/limits.py, decision 0180)
_STAFF = (*_SESSION, "STAFF_REQUIRED")
_CONNECTION_INPUT = (
    "INVALID_PROVIDER_CONNECTION",
    "PROVIDER_ADDRESS_FORBIDDEN",
    "CONNECTION_NAME_TAKEN",
)
_VERSION_INPUT = (
    "INVALID_CONTRACT",
    "INVALID_PRICE",
    "INVALID_VERSION_LABEL",
    "PROVIDER_CONNECTION_NOT_FOUND",
)
_REVIEW = ("VERSION_NOT_FOUND", "VERSION_STATE_CONFLICT", "CONFORMANCE_NOT_PASSED")


# --- the contract's own schema -----------------------------------------------------------


@router.get(
    "/v1/schemas/contract",
    response_model=ContractSchemaOut,
    **problems(),
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
    **problems(*_SESSION, *_CONNECTION_INPUT, *_BODY),
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


@router.get("/v1/provider/connections", response_model=ConnectionList, **problems(*_SESSION))
def list_connections(request: Request, principal: SessionPrincipal) -> ConnectionList:
    with runtime_of(request).db.read() as session:
        rows = queries.connections_of(session, owner_id=principal.account_id)
        return ConnectionList(items=[_connection_out(session, c) for c in rows])


@router.get(
    "/v1/provider/connections/{connection_id}",
    response_model=ConnectionOut,
    **problems(*_SESSION, "PROVIDER_CONNECTION_NOT_FOUND"),
)
def get_connection(
    connection_id: str, request: Request, principal: SessionPrincipal
) -> ConnectionOut:
    return _read_connection(request, principal, connection_id)


@router.post(
    "/v1/provider/connections/{connection_id}:check",
    response_model=ConnectionOut,
    **problems(*_SESSION, "PROVIDER_CONNECTION_NOT_FOUND"),
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
    **problems(*_SESSION, "INVALID_SERVICE_CODE", "INVALID_LISTING", "SERVICE_CODE_TAKEN", *_BODY),
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
        )
        return _listing_out(session, listing)


@router.get("/v1/provider/listings", response_model=ListingList, **problems(*_SESSION))
def list_listings(request: Request, principal: SessionPrincipal) -> ListingList:
    with runtime_of(request).db.read() as session:
        rows = queries.listings_of(session, owner_id=principal.account_id)
        return ListingList(items=[_listing_out(session, listing) for listing in rows])


@router.get(
    "/v1/provider/listings/{service_code}/versions",
    response_model=ListingOut,
    **problems(*_SESSION, "LISTING_NOT_FOUND"),
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
    **problems(*_SESSION, *_VERSION_INPUT, "LISTING_NOT_FOUND", "VERSION_NUMBER_TAKEN", *_BODY),
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
        )
        return _version_out(session, listing, version)


@router.get(
    "/v1/provider/versions/{version_id}",
    response_model=VersionOut,
    **problems(*_SESSION, "VERSION_NOT_FOUND"),
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
    **problems(*_SESSION, *_VERSION_INPUT, "VERSION_NOT_FOUND", "VERSION_IMMUTABLE", *_BODY),
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
        )
        return _version_out(session, listing, version)


@router.post(
    "/v1/provider/versions/{version_id}:submit",
    response_model=VersionOut,
    **problems(*_SESSION, *_REVIEW),
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
    **problems(*_STAFF, *_REVIEW),
)
def approve_version(version_id: str, request: Request, principal: StaffPrincipal) -> VersionOut:
    """SUBMITTED → APPROVED (its connection's current revision is approved with it)."""
    return _reviewed(request, version_id, lifecycle.approve, actor_id=principal.account_id)


@router.post(
    "/v1/staff/versions/{version_id}:request-changes",
    response_model=VersionOut,
    **problems(
        *_STAFF, "VERSION_NOT_FOUND", "VERSION_STATE_CONFLICT", "INVALID_REVIEW_REASON", *_BODY
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
    **problems(*_STAFF, *_REVIEW),
)
def publish_version(version_id: str, request: Request, principal: StaffPrincipal) -> VersionOut:
    """APPROVED → PUBLISHED: contract, price and connection are frozen for ever."""
    return _reviewed(request, version_id, lifecycle.publish_reviewed, actor_id=principal.account_id)
