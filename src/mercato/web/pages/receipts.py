"""Receipts (list, detail, artifacts, open a dispute) and the account's cases."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from mercato.artifacts import flows as artifact_flows
from mercato.artifacts import service as artifacts
from mercato.artifacts.errors import InvocationNotSettled, RangeNotSupported
from mercato.cases import flows as case_flows
from mercato.cases import service as cases
from mercato.core.errors import MercatoError
from mercato.invocations import service as invocations
from mercato.invocations.schemas import public_status
from mercato.providers import service as providers
from mercato.web.api.invocations import provider_client
from mercato.web.deps import runtime_of
from mercato.web.downloads import attachment
from mercato.web.pages.common import (
    Form,
    User,
    finish,
    new_idempotency_key,
    redirect,
    render,
    text_of,
)

router = APIRouter(include_in_schema=False)


@router.get("/receipts")
def receipts_page(request: Request, user: User, cursor: str | None = None) -> Response:
    with runtime_of(request).db.read() as session:
        page = invocations.list_for_owner(
            session, account_id=user.account_id, limit=50, cursor=cursor
        )
    items = [
        {"view": view, "status": public_status(view.state), "receipt": view.receipt()}
        for view in page.items
    ]
    return render(
        request, "receipts.html", title="Receipts", items=items, next_cursor=page.next_cursor
    )


def _receipt_context(request: Request, user_id: str, invocation_id: str) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        view = invocations.get_invocation_for_owner(
            session, account_id=user_id, invocation_id=invocation_id
        )
        stored = artifacts.list_for_invocation(session, invocation_id=invocation_id)
        disputes = [
            case
            for case in cases.list_cases(
                session, account_id=user_id, limit=100, kind="DISPUTE"
            ).items
            if case.invocation_id == invocation_id
        ]
    result = None
    if view.result is not None:
        result = json.dumps(json.loads(view.result), indent=2, ensure_ascii=False)
    return {
        "view": view,
        "receipt": view.receipt(),
        "call_status": public_status(view.state),
        "result": result,
        "artifacts": stored,
        "disputes": disputes,
        "can_dispute": view.settlement == "SETTLED"
        and view.channel == "SESSION"
        and not any(d.state == "OPEN" for d in disputes),
    }


@router.get("/receipts/{invocation_id}")
def receipt_page(request: Request, invocation_id: str, user: User) -> Response:
    context = _receipt_context(request, user.account_id, invocation_id)
    return render(
        request,
        "receipt.html",
        title=f"Receipt {invocation_id}",
        dispute_key=new_idempotency_key(),
        **context,
    )


@router.get("/receipts/{invocation_id}/artifacts/{artifact_id}")
def artifact(request: Request, invocation_id: str, artifact_id: str, user: User) -> Response:
    """The artifact bytes from the platform's store, under the same checks as the API."""
    if "range" in request.headers:
        raise RangeNotSupported()
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        call = invocations.get_invocation_for_owner(
            session, account_id=user.account_id, invocation_id=invocation_id
        )
        if call.settlement != "SETTLED":
            raise InvocationNotSettled(
                "Artifacts are available once the call is settled, and not after a refund."
            )
        stored = artifacts.get_artifact(
            session, invocation_id=invocation_id, artifact_id=artifact_id
        )
    data = artifact_flows.downloadable(
        runtime, provider_client(request), stored, resolve_target=providers.get_dispatch_target
    )
    headers = {
        "Content-Type": stored.entry.media_type,
        "ETag": f'"{stored.entry.digest}"',
        "Cache-Control": "private, max-age=3600",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    if request.query_params.get("download"):
        headers["Content-Disposition"] = attachment(
            stored.entry.artifact_id, stored.entry.media_type
        )
    return finish(request, Response(content=data, headers=headers))


@router.post("/receipts/{invocation_id}/dispute")
def open_dispute(request: Request, invocation_id: str, user: User, form: Form) -> Response:
    reason = text_of(form, "reason")
    errors: dict[str, str] = {}
    if not reason.strip():
        errors["reason"] = "Say why this call should be refunded (1-2000 characters)."
    else:
        try:
            submitted = case_flows.submit_dispute(
                runtime_of(request),
                account_id=user.account_id,
                idempotency_key=text_of(form, "idempotency_key") or new_idempotency_key(),
                invocation_id=invocation_id,
                reason=reason,
            )
        except MercatoError as error:
            errors["reason"] = error.message
        else:
            return redirect(request, f"/cases/{submitted.case.case_id}", notice="dispute-opened")
    context = _receipt_context(request, user.account_id, invocation_id)
    return render(
        request,
        "receipt.html",
        status=400,
        title=f"Receipt {invocation_id}",
        dispute_key=new_idempotency_key(),
        errors=errors,
        values={"reason": reason},
        **context,
    )


@router.get("/cases")
def cases_page(request: Request, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        page = cases.list_cases(session, account_id=user.account_id, limit=100)
    return render(request, "cases.html", title="My cases", items=page.items)


@router.get("/cases/{case_id}")
def case_page(request: Request, case_id: str, user: User) -> Response:
    with runtime_of(request).db.read() as session:
        case = cases.get_case_for(
            session, case_id=case_id, account_id=user.account_id, is_staff=False
        )
    return render(request, "case.html", title=f"Case {case_id}", case=case)
