"""`GET /v1/balance`: the caller's available and reserved points."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from mercato.accounts.schemas import Principal
from mercato.ledger import service as ledger
from mercato.web.deps import current_principal, runtime_of

router = APIRouter(tags=["balance"])


@router.get("/v1/balance")
def balance(
    request: Request, principal: Annotated[Principal, Depends(current_principal)]
) -> dict[str, int]:
    with runtime_of(request).db.read() as session:
        current = ledger.balances(session, account_id=principal.account_id)
    return {"available": current.available, "reserved": current.reserved}
