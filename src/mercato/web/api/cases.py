"""Disputes, content reports and staff decisions (DESIGN.md §9); sessions only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from mercato.accounts.errors import SessionRequired, StaffRequired
from mercato.accounts.schemas import Principal
from mercato.cases import flows
from mercato.cases import service as cases
from mercato.cases.errors import (
    CaseNotFound,
    DisputeAlreadyOpen,
    DisputeNotEligible,
    InvalidCaseInput,
    InvalidCaseTransition,
    InvalidCursor,
)
from mercato.cases.schemas import CaseView, Decision, Submitted
from mercato.catalog.errors import ListingNotFound, VersionNotFound
from mercato.core.errors import Unauthenticated
from mercato.invocations import service as invocations
from mercato.invocations.errors import (
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    InvocationNotFound,
    RequestTooLarge,
)
from mercato.web.api.schemas import IDEMPOTENCY_KEY_PARAMETER, CaseDocument, CasePage
from mercato.web.deps import runtime_of, session_principal, staff_principal
from mercato.web.problems import InvalidRequest, declare

router = APIRouter(tags=["cases"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]
StaffPrincipal = Annotated[Principal, Depends(staff_principal)]
_TEXT = Field(max_length=10_000)
_SESSION = (Unauthenticated, SessionRequired)
_SUBMIT_ERRORS = (
    InvalidRequest,
    RequestTooLarge,
    *_SESSION,
    IdempotencyKeyMissing,
    IdempotencyKeyInvalid,
    InvalidCaseInput,
    IdempotencyKeyReused,
)


def _submit_doc(created: str, replayed: str, *errors: Any) -> dict[str, Any]:
    replay: dict[int | str, dict[str, Any]] = {
        200: {"model": CaseDocument, "description": replayed}
    }
    declared = declare(*_SUBMIT_ERRORS, *errors, answers=replay)
    declared["openapi_extra"] = {
        **declared["openapi_extra"],
        "parameters": [IDEMPOTENCY_KEY_PARAMETER],
    }
    return {
        "status_code": 201,
        "response_model": CaseDocument,
        "response_description": created,
        **declared,
    }


class DisputeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invocationId: str = Field(min_length=1, max_length=40)
    reason: str = _TEXT


class ReportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serviceCode: str = Field(min_length=1, max_length=100)
    version: str = Field(min_length=1, max_length=20)
    category: str = Field(min_length=1, max_length=32)
    text: str = _TEXT


class DecideBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: str = Field(max_length=32)
    reason: str = _TEXT


def _case(view: CaseView, principal: Principal, status: int = 200) -> JSONResponse:
    return JSONResponse(view.to_json(for_staff=principal.is_staff), status_code=status)


def _submitted(result: Submitted, principal: Principal) -> JSONResponse:
    return _case(result.case, principal, 201 if result.created else 200)


@router.post(
    "/v1/disputes",
    **_submit_doc(
        "The dispute was opened.",
        "A replay: the dispute opened earlier with this key.",
        InvocationNotFound,
        DisputeNotEligible,
        DisputeAlreadyOpen,
    ),
)
async def open_dispute(
    body: DisputeBody, request: Request, principal: SessionPrincipal
) -> JSONResponse:
    key = invocations.check_idempotency_key(request.headers.getlist("idempotency-key"))
    result = await run_in_threadpool(
        lambda: flows.submit_dispute(
            runtime_of(request),
            account_id=principal.account_id,
            idempotency_key=key,
            invocation_id=body.invocationId,
            reason=body.reason,
        )
    )
    return _submitted(result, principal)


@router.post(
    "/v1/content-reports",
    **_submit_doc(
        "The report was filed.",
        "A replay: the report filed earlier with this key.",
        ListingNotFound,
        VersionNotFound,
    ),
)
async def submit_report(
    body: ReportBody, request: Request, principal: SessionPrincipal
) -> JSONResponse:
    key = invocations.check_idempotency_key(request.headers.getlist("idempotency-key"))
    result = await run_in_threadpool(
        lambda: flows.submit_report(
            runtime_of(request),
            account_id=principal.account_id,
            idempotency_key=key,
            service_code=body.serviceCode,
            version=body.version,
            category=body.category,
            text=body.text,
        )
    )
    return _submitted(result, principal)


@router.get(
    "/v1/cases",
    response_model=CasePage,
    response_description="The caller's cases (staff: all), newest first.",
    **declare(InvalidRequest, *_SESSION, InvalidCursor, InvalidCaseInput),
)
def list_cases(
    request: Request,
    principal: SessionPrincipal,
    limit: Annotated[int, Query()] = 20,
    cursor: Annotated[str | None, Query()] = None,
    kind: Annotated[str | None, Query()] = None,
    state: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    """The caller's own cases, newest first; staff see every case."""
    with runtime_of(request).db.read() as session:
        page = cases.list_cases(
            session,
            account_id=None if principal.is_staff else principal.account_id,
            limit=limit,
            cursor=cursor,
            kind=kind,
            state=state,
        )
    items = [v.to_json(for_staff=principal.is_staff) for v in page.items]
    return JSONResponse({"items": items, "nextCursor": page.next_cursor})


@router.get(
    "/v1/cases/{case_id}",
    response_model=CaseDocument,
    response_description="The case.",
    **declare(*_SESSION, CaseNotFound, path_params=True),
)
def get_case(case_id: str, request: Request, principal: SessionPrincipal) -> JSONResponse:
    with runtime_of(request).db.read() as session:
        view = cases.get_case_for(
            session,
            case_id=case_id,
            account_id=principal.account_id,
            is_staff=principal.is_staff,
        )
    return _case(view, principal)


@router.post(
    "/v1/cases/{case_id}:decide",
    response_model=CaseDocument,
    response_description="The decided case.",
    **declare(
        InvalidRequest,
        RequestTooLarge,
        *_SESSION,
        StaffRequired,
        InvalidCaseInput,
        CaseNotFound,
        InvalidCaseTransition,
        path_params=True,
    ),
)
def decide(
    case_id: str, body: DecideBody, request: Request, principal: StaffPrincipal
) -> JSONResponse:
    """A staff decision: approve|deny a dispute, uphold|dismiss a report."""
    try:
        decision = Decision(body.decision)
    except ValueError:
        choices = ", ".join(d.value for d in Decision)
        raise InvalidCaseInput(f"decision must be one of {choices}.") from None
    view = flows.decide(
        runtime_of(request),
        case_id=case_id,
        decision=decision,
        reason=body.reason,
        decided_by=principal.account_id,
    )
    return _case(view, principal)
