"""Invoke a service version and read receipts (DESIGN.md §3, spec 4.1)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from mercato.accounts import service as accounts
from mercato.accounts.errors import KeySpendLimitReached
from mercato.accounts.schemas import Principal
from mercato.catalog.errors import ListingUnavailable, VersionNotFound
from mercato.core.errors import MercatoError, Unauthenticated
from mercato.core.logs import request_id_var
from mercato.dispatch.client import ProviderClient
from mercato.invocations import flows
from mercato.invocations import service as invocations
from mercato.invocations.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    InvalidCursor,
    InvalidQuery,
    InvocationNotFound,
    ProviderContractViolation,
    ProviderDefinedFailure,
    ProviderUnavailable,
    RequestSchemaViolation,
    RequestTooComplex,
    RequestTooLarge,
)
from mercato.invocations.schemas import CONTRACT_VIOLATION, InvocationView
from mercato.ledger.errors import InsufficientPoints
from mercato.providers.errors import ProviderBusy, ProviderNotApproved
from mercato.quotas.errors import RateLimitExceeded
from mercato.web import observe
from mercato.web.api.schemas import (
    IDEMPOTENCY_KEY_PARAMETER,
    InvokeBody,
    InvokePending,
    InvokeSuccess,
    Receipt,
    ReceiptPage,
)
from mercato.web.deps import current_principal, runtime_of
from mercato.web.edge import body_of
from mercato.web.problems import QUOTA_HEADERS, InvalidRequest, declare, success_headers

router = APIRouter(tags=["invocations"])


def provider_client(request: Request) -> ProviderClient:
    """The process's pooled sync ProviderClient (artifact pulls, conformance checks), carried
    by the app's Runtime; the invoke path uses the async one."""
    return runtime_of(request).provider_client()


def _json(status: int, body: dict[str, Any], headers: dict[str, str]) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def outcome_response(
    view: InvocationView, headers: dict[str, str], request: Request | None = None
) -> Response:
    """The invoke answer for an invocation in its current state; replays get the same body.
    With `request`, the outcome is noted for the metrics (web/observe.py)."""
    if request is not None:
        observe.note_invoke_outcome(request, view)
    if view.pending:
        location = f"/v1/invocations/{view.invocation_id}"
        return _json(202, view.pending_body(), {**headers, "Location": location})
    if view.state == "SUCCEEDED":
        return _json(200, view.success_body(), headers)
    error = failure_of(view)
    error.headers.update(headers)
    raise error


def failure_of(view: InvocationView) -> MercatoError:
    """The problem of a call that ended FAILED (its reservation released), as the invoke
    answers it (the MCP endpoint's tool results carry the same document)."""
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
    return error


_INVOKE_ERRORS = (
    Unauthenticated,
    IdempotencyKeyMissing,
    IdempotencyKeyInvalid,
    InsufficientPoints,
    KeySpendLimitReached,
    ListingUnavailable,
    VersionNotFound,
    IdempotencyKeyInUse,
    RequestTooLarge,
    IdempotencyKeyReused,
    RequestSchemaViolation,
    RequestTooComplex,
    ProviderDefinedFailure,
    RateLimitExceeded,
    ProviderContractViolation,
    ProviderUnavailable,
    ProviderNotApproved,
    ProviderBusy,
)
_INVOKE_DOC = declare(
    *_INVOKE_ERRORS,
    path_params=True,
    headers={
        409: ("Retry-After",),
        429: ("Retry-After", *QUOTA_HEADERS),
        503: ("Retry-After",),
    },
    answers={
        200: {"headers": success_headers(*QUOTA_HEADERS)},
        202: {
            "model": InvokePending,
            "description": "Accepted; the outcome is pending. Follow the receipt.",
            "headers": success_headers("Location", *QUOTA_HEADERS),
        },
    },
)
_INVOKE_DOC["openapi_extra"] = {
    **_INVOKE_DOC["openapi_extra"],
    "parameters": [IDEMPOTENCY_KEY_PARAMETER],
    "requestBody": {
        "required": True,
        "description": "Send with an `Idempotency-Key` header; reuse it on every retry.",
        # Inline: the route reads the raw body itself (the flow checks it against the
        # version's requestSchema), so FastAPI has no body field to collect a component from.
        "content": {"application/json": {"schema": InvokeBody.model_json_schema()}},
    },
}


# The answer is built by outcome_response and returned as a Response: FastAPI does not validate
# it on this hot path; test_openapi checks real answers against the declared models.
@router.post(
    "/v1/services/{service_code}/versions/{version}:invoke",
    response_model=InvokeSuccess,
    response_description="Succeeded and settled.",
    **_INVOKE_DOC,
)
async def invoke(service_code: str, version: str, request: Request) -> Response:
    # On the event loop end to end (issue 20): `flows.invoke_call` authenticates, checks the
    # key and answers; nothing hops to the thread pool. The two headers it needs, read in one
    # pass over the raw headers (ASGI names are lower-case, values Latin-1).
    authorization: str | None = None
    keys: list[str] = []
    for name, value in request.scope["headers"]:
        if name == b"authorization":
            if authorization is None:
                authorization = value.decode("latin-1")
        elif name == b"idempotency-key":
            keys.append(value.decode("latin-1"))
    body = await body_of(request)  # the body the edge checks read
    token = accounts.bearer_token_of(authorization)  # a malformed one is refused before any read
    notes = request.scope.setdefault("state", {})  # the log line names the caller and call
    call = flows.Call(token, keys, service_code, version, body, request_id_var.get(), notes)
    result = await flows.invoke_call(request.app.state.runtime, call)
    return outcome_response(result.view, result.quota.headers(), request)


@router.get(
    "/v1/invocations",
    response_model=ReceiptPage,
    response_description="The caller's receipts, newest first.",
    **declare(InvalidRequest, Unauthenticated, InvalidCursor, InvalidQuery),
)
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


@router.get(
    "/v1/invocations/{invocation_id}",
    response_model=Receipt,
    response_description="The receipt.",
    **declare(Unauthenticated, InvocationNotFound, path_params=True),
)
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
