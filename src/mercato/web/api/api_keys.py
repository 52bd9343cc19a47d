"""API key management; a browser or program session is required (API keys get 403)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from mercato.accounts import service as accounts
from mercato.accounts.schemas import Principal
from mercato.web.deps import runtime_of, session_principal

router = APIRouter(tags=["api-keys"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]


class CreateKeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


@router.post("/v1/api-keys", status_code=201)
def create_key(
    body: CreateKeyBody, request: Request, principal: SessionPrincipal
) -> dict[str, Any]:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        created = accounts.create_api_key(
            session, account_id=principal.account_id, name=body.name, now=runtime.clock.now()
        )
    return {
        "apiKey": created.api_key,
        "keyId": created.key_id,
        "name": created.name,
        "createdAt": _iso(created.created_at),
    }


@router.get("/v1/api-keys")
def list_keys(request: Request, principal: SessionPrincipal) -> dict[str, Any]:
    with runtime_of(request).db.read() as session:
        keys = accounts.list_api_keys(session, account_id=principal.account_id)
        items = [
            {
                "keyId": key.id,
                "name": key.name,
                "createdAt": _iso(key.created_at),
                "lastUsedAt": _iso(key.last_used_at),
                "revokedAt": _iso(key.revoked_at),
            }
            for key in keys
        ]
    return {"items": items}


@router.post("/v1/api-keys/{key_id}:revoke")
def revoke_key(key_id: str, request: Request, principal: SessionPrincipal) -> dict[str, Any]:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        key = accounts.revoke_api_key(
            session, key_id=key_id, account_id=principal.account_id, now=runtime.clock.now()
        )
        revoked_at = key.revoked_at
    return {"keyId": key_id, "revokedAt": _iso(revoked_at)}
