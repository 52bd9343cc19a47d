"""Invoke a service version and read receipts (DESIGN.md §3, spec 4.1)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from mercato.accounts.schemas import Principal
from mercato.core.errors import MercatoError
from mercato.dispatch.client import ProviderClient
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.errors import (
    ProviderContractViolation,
    ProviderDefinedFailure,
    ProviderUnavailable,
)
from mercato.invocations.schemas import CONTRACT_VIOLATION, InvocationView
from mercato.quotas import service as quotas
from mercato.web.deps import bearer_token, current_principal, principal_in, runtime_of

router = APIRouter(tags=["invocations"])


def provider_client(request: Request) -> ProviderClient:
    """The process's pooled ProviderClient, carried by the app's Runtime."""
    return runtime_of(request).provider_client()


def _json(status: int, body: dict[str, Any], headers: dict[str, str]) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type="application/json"
    )


def outcome_response(view: InvocationView, headers: dict[str, str]) -> Response:
    """The invoke answer for an invocation in its current state; replays get the same body."""
    if view.pending:
        location = f"/v1/invocations/{view.invocation_id}"
        return _json(202, view.pending_body(), {**headers, "Location": location})
    if view.state == "SUCCEEDED":
        return _json(200, view.success_body(), headers)
    error: MercatoError
    if view.provider_http_status is not None:
        error = ProviderDefinedFailure(
            f"The provider answered {view.error_code}; no points were spent.",
            errorCode=view.error_code,
            providerHttpStatus=view.provider_http_status,
            invocationId=view.invocation_id,
        )
    elif view.error_code == CONTRACT_VIOLATION:
        error = ProviderContractViolation(
            "The provider's result broke the version's contract; no points were spent.",
            invocationId=view.invocation_id,
        )
    else:
        error = ProviderUnavailable(
            "The provider did not accept the call; no points were spent.",
            invocationId=view.invocation_id,
        )
    error.headers.update(headers)
    raise error


def _quota_headers(request: Request, account_id: str) -> dict[str, str]:
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        current = quotas.current_status(
            session, account_id=account_id, settings=runtime.settings, now=runtime.clock.now()
        )
    return current.headers()


def _invoke_sync(request: Request, service_code: str, version: str, body: bytes) -> Response:
    # Authentication runs here, in the same worker thread as the call, not as a separate
    # sync dependency (one thread hop per invoke instead of two), and in the same read session
    # as the call's own reads (one session instead of two).
    runtime = runtime_of(request)
    token = bearer_token(request)  # a malformed credential is refused before any database work
    principal: Principal | None = None
    try:
        with runtime.db.read() as session:
            principal = principal_in(request, session, token)
            key = invocations.check_idempotency_key(request.headers.getlist("idempotency-key"))
            prepared = flows.prepare(
                runtime,
                session,
                flows.InvokeRequest(
                    account_id=principal.account_id,
                    channel=principal.channel,
                    service_code=service_code,
                    version=version,
                    idempotency_key=key,
                    body=body,
                ),
            )
        if isinstance(prepared, flows.InvokeResult):
            result = prepared
        else:
            result = flows.run(runtime, provider_client(request), prepared)
        return _answer(request, principal, result)
    except MercatoError as error:
        if principal is not None and "RateLimit" not in error.headers:
            error.headers.update(_quota_headers(request, principal.account_id))
        raise


def _answer(request: Request, principal: Principal, result: flows.InvokeResult) -> Response:
    if result.quota is not None:
        headers = result.quota.headers()
    else:
        headers = _quota_headers(request, principal.account_id)
    return outcome_response(result.view, headers)


@router.post("/v1/services/{service_code}/versions/{version}:invoke")
async def invoke(service_code: str, version: str, request: Request) -> Response:
    body = await request.body()
    return await run_in_threadpool(_invoke_sync, request, service_code, version, body)


@router.get("/v1/invocations")
def list_invocations(
    request: Request,
    principal: Annotated[Principal, Depends(current_principal)],
    limit: Annotated[int, Query()] = 20,
    cursor: Annotated[str | None, Query()] = None,
    status: Annotated[str | None, Query()] = None,
) -> Response:
    with runtime_of(request).db.read() as session:
        page = invocations.list_for_owner(
            session, account_id=principal.account_id, limit=limit, cursor=cursor, status=status
        )
    body = {"items": [v.receipt() for v in page.items], "nextCursor": page.next_cursor}
    return _json(200, body, {})


@router.get("/v1/invocations/{invocation_id}")
def get_invocation(
    invocation_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(current_principal)],
) -> Response:
    with runtime_of(request).db.read() as session:
        view = invocations.get_invocation_for_owner(
            session, account_id=principal.account_id, invocation_id=invocation_id
        )
    return _json(200, view.receipt(), {})
