"""`GET /v1/rate-limit`: the caller's current quota window (spec 2.6)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse

from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.quotas import service as quotas
from mercato.web.api.schemas import RateLimitStatus
from mercato.web.deps import current_principal, runtime_of
from mercato.web.problems import QUOTA_HEADERS, declare, success_headers

router = APIRouter(tags=["rate-limit"])


@router.get(
    "/v1/rate-limit",
    response_model=RateLimitStatus,
    response_description="The current quota window.",
    **declare(Unauthenticated, answers={200: {"headers": success_headers(*QUOTA_HEADERS)}}),
)
def rate_limit(
    request: Request, principal: Annotated[Principal, Depends(current_principal)]
) -> JSONResponse:
    runtime = runtime_of(request)
    with runtime.db.read() as session:
        current = quotas.current_status(
            session,
            account_id=principal.account_id,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
    return JSONResponse(current.to_json(), headers=current.headers())
