"""API key management; a browser or program session is required (API keys get 403)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from mercato.accounts import service as accounts
from mercato.accounts.errors import ApiKeyNotFound, InvalidApiKeyName, SessionRequired
from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.invocations.errors import RequestTooLarge
from mercato.web.api.schemas import ApiKeyList, ApiKeySummary, CreatedApiKey, RevokedApiKey
from mercato.web.deps import runtime_of, session_principal
from mercato.web.problems import InvalidRequest, declare

router = APIRouter(tags=["api-keys"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]


class CreateKeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


_SESSION = (Unauthenticated, SessionRequired)


@router.post(
    "/v1/api-keys",
    status_code=201,
    response_description="The new key; the plaintext is shown only now.",
    **declare(InvalidRequest, RequestTooLarge, *_SESSION, InvalidApiKeyName),
)
def create_key(body: CreateKeyBody, request: Request, principal: SessionPrincipal) -> CreatedApiKey:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        created = accounts.create_api_key(
            session, account_id=principal.account_id, name=body.name, now=runtime.clock.now()
        )
    return CreatedApiKey(
        api_key=created.api_key,
        key_id=created.key_id,
        name=created.name,
        created_at=_iso(created.created_at),
    )


@router.get(
    "/v1/api-keys",
    response_description="The account's API keys (never the plaintext).",
    **declare(*_SESSION),
)
def list_keys(request: Request, principal: SessionPrincipal) -> ApiKeyList:
    with runtime_of(request).db.read() as session:
        keys = accounts.list_api_keys(session, account_id=principal.account_id)
        items = [
            ApiKeySummary(
                key_id=key.id,
                name=key.name,
                created_at=_iso(key.created_at),
                last_used_at=_iso(key.last_used_at),
                revoked_at=_iso(key.revoked_at),
            )
            for key in keys
        ]
    return ApiKeyList(items=items)


@router.post(
    "/v1/api-keys/{key_id}:revoke",
    response_description="The key is revoked (idempotent).",
    **declare(*_SESSION, ApiKeyNotFound, path_params=True),
)
def revoke_key(key_id: str, request: Request, principal: SessionPrincipal) -> RevokedApiKey:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        key = accounts.revoke_api_key(
            session, key_id=key_id, account_id=principal.account_id, now=runtime.clock.now()
        )
        revoked_at = key.revoked_at
    return RevokedApiKey(key_id=key_id, revoked_at=_iso(revoked_at))
