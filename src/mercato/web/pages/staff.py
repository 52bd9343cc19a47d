"""The staff console: approve connections, review and publish drafts, cases, holds, points."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import FormData
from starlette.responses import Response

from mercato.accounts import service as accounts
from mercato.cases import flows as case_flows
from mercato.cases import service as cases
from mercato.cases.schemas import DECISIONS, Decision
from mercato.catalog import lifecycle
from mercato.catalog import service as catalog
from mercato.catalog.errors import VersionNotFound
from mercato.catalog.legacy_patterns import list_legacy_pattern_versions
from mercato.catalog.schemas import ContractDocument
from mercato.core.errors import MercatoError
from mercato.invocations import service as invocations
from mercato.invocations.schemas import Decision as Resolution
from mercato.ledger import service as ledger
from mercato.ledger.split import provider_leg
from mercato.providers import service as providers
from mercato.web.deps import runtime_of
from mercato.web.pages import queries
from mercato.web.pages.common import (
    Form,
    PageUser,
    Staff,
    redirect,
    render,
    text_of,
)
from mercato.web.pages.provider import connection_context

router = APIRouter(include_in_schema=False)

_WHOLE = re.compile(r"[0-9]{1,16}")


def _console(request: Request) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        connections: list[dict[str, Any]] = []
        for c in queries.connections_of(session, owner_id=None):
            if c.approved:
                continue
            latest = providers.latest_run(session, connection_id=c.id, revision=c.revision)
            connections.append(
                {"id": c.id, "name": c.name, "owner_id": c.owner_id, "latest": latest}
            )
        drafts = [
            {
                "id": version.id,
                "service_code": listing.service_code,
                "label": version.label,
                "state": version.state,
                "price": version.price,
                "approved": providers.is_approved(session, connection_id=version.connection_id),
            }
            for listing, version in queries.review_queue(session)
        ]
        open_cases = cases.list_cases(session, account_id=None, limit=100, state="OPEN").items
        approved = cases.list_cases(session, account_id=None, limit=100, state="APPROVED").items
        holds = [(queries.plain(hold), code) for hold, code in queries.active_holds(session)]
        listings = [listing.service_code for listing in queries.all_listings(session)]
        owners = queries.emails(session, {str(c["owner_id"]) for c in connections})
        stuck = invocations.list_stuck(session, limit=100)
        legacy = list_legacy_pattern_versions(session)
    return {
        "stuck": stuck,
        "legacy_patterns": legacy,
        "connections": connections,
        "owners": owners,
        "drafts": drafts,
        "open_cases": open_cases,
        "approved_cases": approved,
        "holds": holds,
        "listings": listings,
    }


@router.get("/staff")
def console(request: Request, _user: Staff) -> Response:
    return render(request, "staff.html", title="Staff console", **_console(request))


def _console_error(
    request: Request, errors: dict[str, str], values: dict[str, str], *, status: int = 400
) -> Response:
    return render(
        request,
        "staff.html",
        status=status,
        title="Staff console",
        errors=errors,
        values=values,
        **_console(request),
    )


# --- connections -------------------------------------------------------------------------


@router.get("/staff/connections/{connection_id}")
def connection_page(request: Request, connection_id: str, _user: Staff) -> Response:
    with runtime_of(request).db.read() as session:
        connection = providers.get_connection(session, connection_id=connection_id)
        context = connection_context(session, connection)
    return render(request, "connection.html", title="Review connection", staff=True, **context)


@router.post("/staff/connections/{connection_id}/approve")
def approve(request: Request, connection_id: str, user: Staff, _form: Form) -> Response:
    runtime = runtime_of(request)
    try:
        with runtime.db.transaction() as session:
            providers.approve_connection(
                session,
                connection_id=connection_id,
                now=runtime.clock.now(),
                approved_by=user.account_id,
            )
    except MercatoError as error:
        with runtime.db.read() as session:
            connection = providers.get_connection(session, connection_id=connection_id)
            context = connection_context(session, connection)
        return render(
            request,
            "connection.html",
            status=409,
            title="Review connection",
            staff=True,
            errors={"approve": error.message},
            **context,
        )
    return redirect(request, f"/staff/connections/{connection_id}", notice="approved")


# --- versions ----------------------------------------------------------------------------


def _version_context(request: Request, version_id: str) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        found = queries.version(session, version_id=version_id)
        if found is None:
            raise VersionNotFound("There is no such version.")
        listing, version = found
        contract = ContractDocument.of(version)
        connection = providers.get_connection(session, connection_id=version.connection_id)
        latest = providers.latest_run(session, connection_id=connection.id)
        steps = lifecycle.transitions_of(session, version_id=version.id)
        actors = {step.actor_id for step in steps if step.actor_id is not None}
        return {
            "listing": queries.plain(listing),
            "version": queries.plain(version),
            "contract": contract,
            "contract_text": json.dumps(version.contract, indent=2, sort_keys=True),
            "connection_approved": connection.approved,
            "latest": latest,
            "latest_current": latest is not None
            and latest.connection_revision == connection.revision,
            "transitions": steps,
            "emails": queries.emails(session, actors),
            "points_per_call": provider_leg(version.price, listing.provider_share_bps),
        }


@router.get("/staff/versions/{version_id}")
def version_page(request: Request, version_id: str, _user: Staff) -> Response:
    context = _version_context(request, version_id)
    title = f"Review {context['listing'].service_code} {context['version'].label}"
    return render(request, "staff_version.html", title=title, **context)


_STEPS: dict[str, Callable[..., Any]] = {
    "approve": lifecycle.approve,
    "publish": lifecycle.publish_reviewed,
    "request-changes": lifecycle.request_changes,
}
_NOTICES = {
    "approve": "version-approved",
    "publish": "published",
    "request-changes": "changes-requested",
}


@router.post("/staff/versions/{version_id}/approve")
def approve_version(request: Request, version_id: str, user: Staff, form: Form) -> Response:
    return _review(request, version_id, "approve", user, form)


@router.post("/staff/versions/{version_id}/publish")
def publish(request: Request, version_id: str, user: Staff, form: Form) -> Response:
    return _review(request, version_id, "publish", user, form)


@router.post("/staff/versions/{version_id}/request-changes")
def request_changes(request: Request, version_id: str, user: Staff, form: Form) -> Response:
    return _review(request, version_id, "request-changes", user, form)


def _review(
    request: Request, version_id: str, step: str, user: PageUser, form: FormData
) -> Response:
    """Approve, publish or request changes: the same lifecycle steps as the staff API."""
    action = _STEPS[step]
    runtime = runtime_of(request)
    extra = {"reason": text_of(form, "reason")} if step == "request-changes" else {}
    try:
        with runtime.db.transaction() as session:
            if queries.version(session, version_id=version_id) is None:
                raise VersionNotFound("There is no such version.")
            action(
                session,
                version_id=version_id,
                actor_id=user.account_id,
                now=runtime.clock.now(),
                **extra,
            )
    except VersionNotFound:
        raise
    except MercatoError as error:
        context = _version_context(request, version_id)
        field = "reason" if step == "request-changes" else step
        return render(
            request,
            "staff_version.html",
            status=error.status,
            title=f"Review {context['listing'].service_code} {context['version'].label}",
            errors={field: error.message},
            values=extra,
            **context,
        )
    return redirect(request, f"/staff/versions/{version_id}", notice=_NOTICES[step])


# --- cases -------------------------------------------------------------------------------


@router.get("/staff/cases/{case_id}")
def case_page(request: Request, case_id: str, user: Staff) -> Response:
    return _case_page(request, case_id, user)


def _case_page(
    request: Request,
    case_id: str,
    user: PageUser,
    *,
    status: int = 200,
    errors: dict[str, str] | None = None,
) -> Response:
    with runtime_of(request).db.read() as session:
        case = cases.get_case_for(
            session, case_id=case_id, account_id=user.account_id, is_staff=True
        )
        submitter = queries.emails(session, {case.account_id}).get(case.account_id, "")
    choices = [d.value for d, (kind, _) in DECISIONS.items() if kind == case.kind]
    return render(
        request,
        "staff_case.html",
        status=status,
        title=f"Case {case_id}",
        case=case,
        submitter=submitter,
        choices=choices,
        errors=errors or {},
    )


@router.post("/staff/cases/{case_id}/decide")
def decide(request: Request, case_id: str, user: Staff, form: Form) -> Response:
    reason = text_of(form, "reason")
    try:
        decision = Decision(text_of(form, "decision"))
    except ValueError:
        return _case_page(request, case_id, user, status=400, errors={"decision": "Choose one."})
    if not reason.strip():
        return _case_page(request, case_id, user, status=400, errors={"reason": "Give the reason."})
    try:
        case_flows.decide(
            runtime_of(request),
            case_id=case_id,
            decision=decision,
            reason=reason,
            decided_by=user.account_id,
        )
    except MercatoError as error:
        return _case_page(request, case_id, user, status=409, errors={"decision": error.message})
    return redirect(request, f"/staff/cases/{case_id}", notice="decided")


# --- stuck calls (decisions 0201, 0202) -------------------------------------------------


@router.get("/staff/invocations/{invocation_id}")
def invocation_page(request: Request, invocation_id: str, _user: Staff) -> Response:
    return _invocation_page(request, invocation_id)


def _invocation_page(
    request: Request,
    invocation_id: str,
    *,
    status: int = 200,
    errors: dict[str, str] | None = None,
    values: dict[str, str] | None = None,
) -> Response:
    with runtime_of(request).db.read() as session:
        view = invocations.get_view(session, invocation_id=invocation_id)
        progress = invocations.progress_of(session, invocation_id=invocation_id)
    return render(
        request,
        "staff_invocation.html",
        status=status,
        title=f"Call {invocation_id}",
        view=view,
        progress=progress,
        resolution=view.resolution(),
        errors=errors or {},
        values=values or {},
    )


@router.post("/staff/invocations/{invocation_id}/resolve")
def resolve(request: Request, invocation_id: str, user: Staff, form: Form) -> Response:
    runtime = runtime_of(request)
    reason = text_of(form, "reason")
    values = {"reason": reason}
    try:
        decision = Resolution(text_of(form, "decision"))
    except ValueError:
        errors = {"decision": "Choose SUCCEEDED or FAILED."}
        return _invocation_page(request, invocation_id, status=400, errors=errors, values=values)
    try:
        invocations.check_reason(reason)
        with runtime.db.transaction() as session:
            invocations.resolve(
                session,
                invocation_id=invocation_id,
                decision=decision,
                reason=reason,
                actor=user.account_id,
                now=runtime.clock.now(),
            )
    except MercatoError as error:
        if error.status == 404:
            raise
        key, status = ("reason", 400) if error.status == 422 else ("decision", 409)
        errors = {key: error.message}
        return _invocation_page(request, invocation_id, status=status, errors=errors, values=values)
    return redirect(request, f"/staff/invocations/{invocation_id}", notice="decided")


# --- holds and points --------------------------------------------------------------------


@router.post("/staff/holds")
def place_hold(request: Request, user: Staff, form: Form) -> Response:
    runtime = runtime_of(request)
    code, reason = text_of(form, "service_code"), text_of(form, "hold_reason")
    try:
        with runtime.db.transaction() as session:
            catalog.place_hold(
                session,
                service_code=code,
                kind="staff",
                reason=reason,
                created_by=user.account_id,
                now=runtime.clock.now(),
            )
    except MercatoError as error:
        key = "hold_reason" if "reason" in error.message else "service_code"
        return _console_error(
            request, {key: error.message}, {"service_code": code, "hold_reason": reason}
        )
    return redirect(request, "/staff", notice="hold-placed")


@router.post("/staff/holds/{hold_id}/release")
def release_hold(request: Request, hold_id: str, user: Staff, _form: Form) -> Response:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        catalog.release_hold(
            session, hold_id=hold_id, released_by=user.account_id, now=runtime.clock.now()
        )
    return redirect(request, "/staff", notice="hold-released")


@router.post("/staff/grants")
def grant(request: Request, _user: Staff, form: Form) -> Response:
    """Grant points to an account by email, with a reason kept on the ledger transfer."""
    runtime = runtime_of(request)
    email, amount_text = text_of(form, "email").strip(), text_of(form, "amount").strip()
    reason = text_of(form, "grant_reason").strip()
    values = {"email": email, "amount": amount_text, "grant_reason": reason}
    errors = _grant_errors(amount_text, reason)
    if errors:
        return _console_error(request, errors, values, status=422)
    try:
        with runtime.db.transaction() as session:
            account = accounts.get_account_by_email(session, email=email)
            ledger.grant(
                session,
                account_id=account.id,
                amount=int(amount_text),
                now=runtime.clock.now(),
                memo=reason,
            )
    except MercatoError as error:
        key = "email" if "ccount" in error.message else "amount"
        return _console_error(request, {key: error.message}, values, status=422)
    return redirect(request, "/staff", notice="granted")


def _grant_errors(amount_text: str, reason: str) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not _WHOLE.fullmatch(amount_text) or not 0 < int(amount_text) <= ledger.MAX_AMOUNT:
        errors["amount"] = f"A whole number of points from 1 to {ledger.MAX_AMOUNT}."
    if not 0 < len(reason) <= ledger.MEMO_MAX:
        errors["grant_reason"] = f"Say why (1-{ledger.MEMO_MAX} characters)."
    return errors
