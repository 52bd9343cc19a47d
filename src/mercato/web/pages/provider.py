"""The provider console: connections and their checks, listings, draft versions, earnings.

Every object is looked up with its owner: another account's connection, listing or version is
simply not found here.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from mercato.catalog import lifecycle
from mercato.catalog import service as catalog
from mercato.catalog.contracts import contract_input
from mercato.catalog.errors import (
    InvalidContract,
    InvalidExample,
    ListingNotFound,
    VersionNotFound,
)
from mercato.catalog.examples import TEMPLATES, template_contract
from mercato.catalog.models import CHANGES_REQUESTED, Listing, Version
from mercato.conformance import flows as conformance
from mercato.core.errors import MercatoError
from mercato.ledger import service as ledger
from mercato.ledger.split import provider_leg
from mercato.providers import service as providers
from mercato.providers.errors import ConnectionNameTaken, ConnectionNotFound
from mercato.providers.models import ProviderConnection
from mercato.web.api.invocations import provider_client
from mercato.web.deps import runtime_of
from mercato.web.pages import queries
from mercato.web.pages.common import (
    Form,
    PageUser,
    User,
    connection_facts,
    redirect,
    render,
    text_of,
)

router = APIRouter(include_in_schema=False)


# --- overview ----------------------------------------------------------------------------


def _overview(request: Request, user: PageUser) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        connections = [
            {
                "id": c.id,
                "name": c.name,
                "base_url": c.base_url,
                "revision": c.revision,
                "approved": c.approved,
                "latest": providers.latest_run(session, connection_id=c.id, revision=c.revision),
            }
            for c in queries.connections_of(session, owner_id=user.account_id)
        ]
        listings = [
            {
                "listing": queries.plain(listing),
                "versions": [
                    queries.plain(v) for v in queries.versions_of(session, listing_id=listing.id)
                ],
            }
            for listing in queries.listings_of(session, owner_id=user.account_id)
        ]
        earnings = ledger.balances(session, account_id=user.account_id).earnings
    return {"connections": connections, "listings": listings, "earnings": earnings}


@router.get("/provider")
def console(request: Request, user: User) -> Response:
    return render(request, "provider.html", title="Provider console", **_overview(request, user))


# The form's input for each member a connection error names (`field`).
_CONNECTION_FIELDS = {"name": "name", "baseUrl": "base_url", "credential": "credential"}


def _connection_error(error: MercatoError) -> dict[str, str]:
    """The error shown next to the form input it is about (the name when it names none)."""
    if isinstance(error, ConnectionNameTaken):
        return {"name": "You already have a connection with this name."}
    return {_CONNECTION_FIELDS.get(error.extra.get("field", ""), "name"): error.message}


@router.post("/provider/connections")
def create_connection(request: Request, user: User, form: Form) -> Response:
    name, base_url = text_of(form, "name"), text_of(form, "base_url")
    try:
        submitted = conformance.submit_connection(
            runtime_of(request),
            provider_client(request),
            owner_id=user.account_id,
            name=name,
            base_url=base_url,
            credential=text_of(form, "credential"),
        )
    except MercatoError as error:
        return render(
            request,
            "provider.html",
            status=error.status,
            title="Provider console",
            errors=_connection_error(error),
            values={"name": name, "base_url": base_url},
            **_overview(request, user),
        )
    url = f"/provider/connections/{submitted.connection_id}"
    return redirect(request, url, notice="connection-created")


# --- one connection ----------------------------------------------------------------------


def _own_connection(session: Session, user: PageUser, connection_id: str) -> ProviderConnection:
    connection = providers.get_connection(session, connection_id=connection_id)
    if connection.owner_id != user.account_id:
        raise ConnectionNotFound()
    return connection


def connection_context(session: Session, connection: ProviderConnection) -> dict[str, Any]:
    runs = providers.list_runs(session, connection_id=connection.id, limit=20)
    return {
        "connection": {
            "id": connection.id,
            "name": connection.name,
            "base_url": connection.base_url,
            "revision": connection.revision,
            "approved": connection.approved,
            "approved_at": connection.approved_at,
        },
        "latest": runs[0] if runs else None,
        "runs": runs,
        "evidence": lambda detail: json.dumps(detail, sort_keys=True),
    }


@router.get("/provider/connections/{connection_id}")
def connection_page(request: Request, connection_id: str, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        context = connection_context(session, _own_connection(session, user, connection_id))
    return render(request, "connection.html", title="Connection", **context)


@router.post("/provider/connections/{connection_id}")
def change_connection(request: Request, connection_id: str, user: User, form: Form) -> Response:
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        _own_connection(session, user, connection_id)
    name, base_url, credential = (text_of(form, n) for n in ("name", "base_url", "credential"))
    try:
        changed = conformance.change_connection(
            runtime,
            provider_client(request),
            connection_id=connection_id,
            name=name or None,
            base_url=base_url or None,
            credential=credential or None,
        )
    except MercatoError as error:
        with runtime.db.read() as session:
            context = connection_context(session, _own_connection(session, user, connection_id))
        return render(
            request,
            "connection.html",
            status=error.status,
            title="Connection",
            errors=_connection_error(error),
            values={"name": name, "base_url": base_url},
            **context,
        )
    notice = "connection-changed" if changed.run is not None else "connection-unchanged"
    return redirect(request, f"/provider/connections/{connection_id}", notice=notice)


@router.post("/provider/connections/{connection_id}/check")
def run_check(request: Request, connection_id: str, user: User, _form: Form) -> Response:
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        _own_connection(session, user, connection_id)
    conformance.check_connection(runtime, provider_client(request), connection_id=connection_id)
    return redirect(request, f"/provider/connections/{connection_id}", notice="check-ran")


# --- listings and drafts -----------------------------------------------------------------


@router.post("/provider/listings")
def create_listing(request: Request, user: User, form: Form) -> Response:
    runtime = runtime_of(request)
    code, name = text_of(form, "service_code").strip(), text_of(form, "display_name").strip()
    description = text_of(form, "description")
    errors: dict[str, str] = {}
    try:
        with runtime.db.transaction() as session:
            catalog.create_listing(
                session,
                service_code=code,
                display_name=name,
                description=description,
                owner_id=user.account_id,
                now=runtime.clock.now(),
            )
    except MercatoError as error:
        key = "display_name" if "display name" in error.message else "service_code"
        if "description" in error.message:
            key = "description"
        errors[key] = error.message
        return render(
            request,
            "provider.html",
            status=400,
            title="Provider console",
            errors=errors,
            values={"service_code": code, "display_name": name, "description": description},
            **_overview(request, user),
        )
    return redirect(request, f"/provider/listings/{code}", notice="listing-created")


def _own_listing(session: Session, user: PageUser, service_code: str) -> Listing:
    listing = catalog.get_listing(session, service_code=service_code)
    if listing.owner_id != user.account_id:
        raise ListingNotFound(f"There is no listing {service_code}.")
    return listing


def _listing_context(session: Session, user: PageUser, listing: Listing) -> dict[str, Any]:
    versions = queries.versions_of(session, listing_id=listing.id)
    connections = queries.connections_of(session, owner_id=user.account_id)
    return {
        "listing": queries.plain(listing),
        "versions": [queries.plain(v) for v in versions],
        "connections": [{"id": c.id, "name": c.name, "approved": c.approved} for c in connections],
        "next_label": f"v{max((v.number for v in versions), default=0) + 1}",
        "templates": list(TEMPLATES),
        "template_text": "",
    }


@router.get("/provider/listings/{service_code}")
def listing_page(request: Request, service_code: str, user: User, template: str = "") -> Response:
    """The listing's versions and the new-draft form: empty, or filled from a template."""
    with runtime_of(request).db.read() as session:
        context = _listing_context(session, user, _own_listing(session, user, service_code))
    chosen = template_contract(template)
    if chosen is not None:
        context["template_text"] = json.dumps(chosen, indent=2)
    return render(request, "provider_listing.html", title=f"Listing {service_code}", **context)


@router.post("/provider/listings/{service_code}/publisher")
def set_publisher(request: Request, service_code: str, user: User, form: Form) -> Response:
    """Name the publisher callers see on the listing (blank: no name)."""
    runtime = runtime_of(request)
    name = text_of(form, "publisher_name")
    try:
        with runtime.db.transaction() as session:
            listing = _own_listing(session, user, service_code)
            catalog.set_publisher_name(session, listing_id=listing.id, publisher_name=name)
    except ListingNotFound:
        raise
    except MercatoError as error:
        with runtime.db.read() as session:
            context = _listing_context(session, user, _own_listing(session, user, service_code))
        return render(
            request,
            "provider_listing.html",
            status=400,
            title=f"Listing {service_code}",
            errors={"publisher_name": error.message},
            values={"publisher_name": name},
            **context,
        )
    return redirect(request, f"/provider/listings/{service_code}", notice="publisher-named")


def _parse_examples(text: str) -> Any:
    """The examples textarea: blank keeps what the version has; else a JSON list."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _FormError("examples", f"The examples are not valid JSON: {exc}.") from exc


def _parse_contract(text: str) -> Any:
    if not text.strip():
        raise _FormError(
            "contract",
            "Write the contract, or start from a template: " + ", ".join(TEMPLATES) + ".",
        )
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _FormError("contract", f"The contract is not valid JSON: {exc}.") from exc


def _parse_price(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise _FormError("price", "The price is a whole number of points.") from None


class _FormError(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name, self.message = name, message


def _draft_error(error: MercatoError) -> dict[str, str]:
    if isinstance(error, InvalidExample):
        return {"examples": error.message}
    if isinstance(error, InvalidContract):
        pointed = error.extra.get("errors") or []
        lines = [f"{e['pointer'] or '/'}: {e['detail']}" for e in pointed]
        return {"contract": "The contract is not valid. " + "; ".join(lines)}
    text = error.message
    if "price" in text.lower():
        return {"price": text}
    if "connection" in text.lower():
        return {"connection_id": text}
    if "version" in text.lower() and "contract" not in text.lower():
        return {"version": text}
    return {"contract": text}


@router.post("/provider/listings/{service_code}/drafts")
def create_draft(request: Request, service_code: str, user: User, form: Form) -> Response:
    runtime = runtime_of(request)
    values = {n: text_of(form, n) for n in ("version", "connection_id", "price", "contract")}
    errors: dict[str, str] = {}
    try:
        contract = _parse_contract(values["contract"])
        price = _parse_price(values["price"])
        with runtime.db.transaction() as session:
            listing = _own_listing(session, user, service_code)
            facts = connection_facts(session, connection_id=values["connection_id"])
            if facts.owner_id != user.account_id:
                raise _FormError("connection_id", "Choose one of your connections.")
            draft = catalog.create_draft(
                session,
                listing_id=listing.id,
                version=values["version"].strip(),
                connection=facts,
                price=price,
                contract=contract,
                now=runtime.clock.now(),
                role="provider",
                actor_id=user.account_id,
            )
            draft_id = draft.id
    except _FormError as error:
        errors[error.name] = error.message
    except ConnectionNotFound:
        errors["connection_id"] = "Choose one of your connections."
    except ListingNotFound:
        raise
    except MercatoError as error:
        errors.update(_draft_error(error))
    if errors:
        with runtime.db.read() as session:
            context = _listing_context(session, user, _own_listing(session, user, service_code))
        context["template_text"] = values["contract"]
        return render(
            request,
            "provider_listing.html",
            status=400,
            title=f"Listing {service_code}",
            errors=errors,
            values=values,
            **context,
        )
    return redirect(request, f"/provider/versions/{draft_id}", notice="draft-created")


def _own_version(session: Session, user: PageUser, version_id: str) -> tuple[Listing, Version]:
    found = queries.version(session, version_id=version_id)
    if found is None or found[0].owner_id != user.account_id:
        raise VersionNotFound("There is no such version.")
    return found


def _version_context(session: Session, user: PageUser, version_id: str) -> dict[str, Any]:
    listing, version = _own_version(session, user, version_id)
    connections = queries.connections_of(session, owner_id=user.account_id)
    steps = lifecycle.transitions_of(session, version_id=version.id)
    changes_requested = version.state == CHANGES_REQUESTED and steps
    return {
        "listing": queries.plain(listing),
        "version": queries.plain(version),
        "contract_text": json.dumps(contract_input(version.contract), indent=2, sort_keys=True),
        "examples_text": (
            "" if version.examples is None else json.dumps(version.examples, indent=2)
        ),
        "connections": [{"id": c.id, "name": c.name, "approved": c.approved} for c in connections],
        "connection_approved": providers.is_approved(session, connection_id=version.connection_id),
        "transitions": steps,
        "review_reason": steps[-1].reason if changes_requested else None,
        "points_per_call": provider_leg(version.price, listing.provider_share_bps),
        "earnings": queries.version_earnings(
            session, version_id=version.id, provider_id=user.account_id
        ),
        "outcomes": queries.version_outcomes(session, version_id=version.id),
        "recent_calls": queries.RECENT_CALLS,
    }


@router.get("/provider/versions/{version_id}")
def version_page(request: Request, version_id: str, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        context = _version_context(session, user, version_id)
    title = f"{context['listing'].service_code} {context['version'].label}"
    return render(request, "provider_version.html", title=title, **context)


@router.post("/provider/versions/{version_id}")
def save_draft(request: Request, version_id: str, user: User, form: Form) -> Response:
    runtime = runtime_of(request)
    values = {n: text_of(form, n) for n in ("connection_id", "price", "contract", "examples")}
    errors: dict[str, str] = {}
    try:
        contract = _parse_contract(values["contract"])
        examples = _parse_examples(values["examples"])
        price = _parse_price(values["price"])
        with runtime.db.transaction() as session:
            _own_version(session, user, version_id)
            facts = connection_facts(session, connection_id=values["connection_id"])
            if facts.owner_id != user.account_id:
                raise _FormError("connection_id", "Choose one of your connections.")
            catalog.update_draft(
                session,
                version_id=version_id,
                connection=facts,
                price=price,
                contract=contract,
                now=runtime.clock.now(),
                role="provider",
                actor_id=user.account_id,
                examples=examples,
            )
    except _FormError as error:
        errors[error.name] = error.message
    except ConnectionNotFound:
        errors["connection_id"] = "Choose one of your connections."
    except VersionNotFound:
        raise
    except MercatoError as error:
        errors.update(_draft_error(error))
    if errors:
        with runtime.db.read() as session:
            context = _version_context(session, user, version_id)
        context["contract_text"] = values["contract"]
        return render(
            request,
            "provider_version.html",
            status=400,
            title=f"{context['listing'].service_code} {context['version'].label}",
            errors=errors,
            values=values,
            **context,
        )
    return redirect(request, f"/provider/versions/{version_id}", notice="draft-saved")


@router.post("/provider/versions/{version_id}/submit")
def submit_for_review(request: Request, version_id: str, user: User, _form: Form) -> Response:
    """DRAFT or CHANGES_REQUESTED → SUBMITTED, bound to the connection's passing latest run."""
    runtime = runtime_of(request)
    try:
        with runtime.db.transaction() as session:
            _own_version(session, user, version_id)
            lifecycle.submit(
                session, version_id=version_id, actor_id=user.account_id, now=runtime.clock.now()
            )
    except VersionNotFound:
        raise
    except MercatoError as error:
        with runtime.db.read() as session:
            context = _version_context(session, user, version_id)
        return render(
            request,
            "provider_version.html",
            status=error.status,
            title=f"{context['listing'].service_code} {context['version'].label}",
            errors={"submit": error.message},
            **context,
        )
    return redirect(request, f"/provider/versions/{version_id}", notice="submitted")
