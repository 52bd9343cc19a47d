"""Catalog endpoints (spec 4.1): listings, exact versions, contracts, and the old paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse, Response

from mercato.catalog import search, service
from mercato.catalog.errors import InvalidCursor, InvalidSearch, ListingNotFound, VersionNotFound
from mercato.catalog.schemas import (
    ContractDocument,
    ListingDocument,
    ListingPage,
    ListingSummary,
    VersionDocument,
)
from mercato.core.canonical import digest_of
from mercato.core.errors import MercatoError
from mercato.web.deps import runtime_of
from mercato.web.problems import InvalidRequest, declare, success_headers

router = APIRouter(tags=["catalog"])

IMMUTABLE_CACHE = "public, max-age=31536000, immutable"
LISTINGS = "/v1/catalog/listings"
SERVICES = "/v1/catalog/services"

Limit = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str | None, Query(max_length=200)]
Search = Annotated[
    str,
    Query(
        description=(
            "Search: listings whose service code, display name or description contains every "
            "whitespace-separated word (ASCII letters case-insensitive; % and _ are literal). "
            f"At most {search.SEARCH_MAX_CHARS} characters (longer: 400 INVALID_SEARCH); "
            "empty: no filter. A nextCursor is valid only with the same q."
        )
    ),
]

_CACHED = ("ETag", "Cache-Control")
_LISTINGS_DOC: dict[str, Any] = {
    "response_model": ListingPage,
    "response_description": "One page of public listings, filtered by `q` when given.",
    **declare(InvalidRequest, InvalidCursor, InvalidSearch),
}
_LISTING_DOC: dict[str, Any] = {
    "response_model": ListingDocument,
    "response_description": "The listing and its public versions.",
    **declare(InvalidRequest, ListingNotFound, path_params=True),
}


def _frozen_doc(model: type[Any], what: str) -> dict[str, Any]:
    answers: dict[int | str, dict[str, Any]] = {
        200: {"headers": success_headers(*_CACHED)},
        304: {
            "description": "Not modified (If-None-Match matched the ETag).",
            "headers": success_headers(*_CACHED),
        },
    }
    return {
        "response_model": model,
        "response_description": what,
        **declare(
            InvalidRequest, ListingNotFound, VersionNotFound, path_params=True, answers=answers
        ),
    }


_VERSION_DOC = _frozen_doc(VersionDocument, "The exact published version.")
_CONTRACT_DOC = _frozen_doc(ContractDocument, "The version's contract (spec 2.2).")


def _listings_page(request: Request, limit: int, cursor: str | None, q: str) -> Response:
    terms = search.search_terms(q)
    after = search.cursor_after(cursor, terms, check_code=service.check_service_code)
    with runtime_of(request).db.read() as session:
        rows, more = service.public_listings(session, limit=limit, after=after, terms=terms)
        items = [ListingSummary.of(listing, versions) for listing, versions in rows]
    next_cursor = search.next_cursor(items[-1].service_code, terms) if more and items else None
    return JSONResponse(ListingPage(items=items, next_cursor=next_cursor).body())


def _listing(request: Request, service_code: str) -> Response:
    with runtime_of(request).db.read() as session:
        listing, versions = service.public_listing(session, service_code=service_code)
        document = ListingDocument.of(listing, versions)
    return JSONResponse(document.body())


def _version(request: Request, service_code: str, version: str) -> Response:
    with runtime_of(request).db.read() as session:
        row = service.public_version(session, service_code=service_code, version=version)
        body = VersionDocument.of(row).body()
    return _immutable(request, body, etag=digest_of(body))


def _contract(request: Request, service_code: str, version: str) -> Response:
    with runtime_of(request).db.read() as session:
        row = service.public_version(session, service_code=service_code, version=version)
        document = ContractDocument.of(row)
    return _immutable(request, document.body(), etag=document.contract_digest)


def _immutable(request: Request, body: dict[str, Any], *, etag: str) -> Response:
    """Answer a frozen document with a strong validator, long caching and 304s."""
    tag = f'"{etag}"'
    headers = {"ETag": tag, "Cache-Control": IMMUTABLE_CACHE}
    if _matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers=headers)
    return JSONResponse(body, headers=headers)


def _matches(if_none_match: str | None, tag: str) -> bool:
    if not if_none_match:
        return False
    candidates = [c.strip() for c in if_none_match.split(",")]
    return any(c == "*" or c.removeprefix("W/") == tag for c in candidates)


# --- the listing paths ------------------------------------------------------------------


@router.get(LISTINGS, **_LISTINGS_DOC)
def list_listings(
    request: Request, limit: Limit = 20, cursor: Cursor = None, q: Search = ""
) -> Response:
    return _listings_page(request, limit, cursor, q)


@router.get(LISTINGS + "/{service_code}", **_LISTING_DOC)
def get_listing(request: Request, service_code: str) -> Response:
    return _listing(request, service_code)


@router.get(LISTINGS + "/{service_code}/versions/{version}", **_VERSION_DOC)
def get_version(request: Request, service_code: str, version: str) -> Response:
    return _version(request, service_code, version)


@router.get(LISTINGS + "/{service_code}/versions/{version}/contract", **_CONTRACT_DOC)
def get_contract(request: Request, service_code: str, version: str) -> Response:
    return _contract(request, service_code, version)


# --- compatibility paths: same answers, marked deprecated, pointing at their successor ---


def _seg(value: str) -> str:
    return quote(value, safe="")


def _deprecated(successor: str, answer: Callable[[], Response]) -> Response:
    headers = {"Deprecation": "true", "Link": f'<{successor}>; rel="successor-version"'}
    try:
        response = answer()
    except MercatoError as error:
        error.headers.update(headers)
        raise
    response.headers.update(headers)
    return response


@router.get(SERVICES, deprecated=True, **_LISTINGS_DOC)
def list_services(
    request: Request, limit: Limit = 20, cursor: Cursor = None, q: Search = ""
) -> Response:
    return _deprecated(LISTINGS, lambda: _listings_page(request, limit, cursor, q))


@router.get(SERVICES + "/{service_code}", deprecated=True, **_LISTING_DOC)
def get_service(request: Request, service_code: str) -> Response:
    successor = f"{LISTINGS}/{_seg(service_code)}"
    return _deprecated(successor, lambda: _listing(request, service_code))


@router.get(SERVICES + "/{service_code}/versions/{version}", deprecated=True, **_VERSION_DOC)
def get_service_version(request: Request, service_code: str, version: str) -> Response:
    successor = f"{LISTINGS}/{_seg(service_code)}/versions/{_seg(version)}"
    return _deprecated(successor, lambda: _version(request, service_code, version))


@router.get(
    SERVICES + "/{service_code}/versions/{version}/contract", deprecated=True, **_CONTRACT_DOC
)
def get_service_contract(request: Request, service_code: str, version: str) -> Response:
    successor = f"{LISTINGS}/{_seg(service_code)}/versions/{_seg(version)}/contract"
    return _deprecated(successor, lambda: _contract(request, service_code, version))
