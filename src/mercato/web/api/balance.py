"""`GET /v1/balance`: the caller's available and reserved points."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.ledger import service as ledger
from mercato.web.api.schemas import Balance
from mercato.web.deps import current_principal, runtime_of
from mercato.web.problems import declare

router = APIRouter(tags=["balance"])


@router.get("/v1/balance", response_description="The caller's points.", **declare(Unauthenticated))
def balance(
    request: Request, principal: Annotated[Principal, Depends(current_principal)]
) -> Balance:
    with runtime_of(request).db.read() as session:
        current = ledger.balances(session, account_id=principal.account_id)
    return Balance(available=current.available, reserved=current.reserved)
