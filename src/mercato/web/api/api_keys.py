"""API key management and spend limits; a browser or program session is required (API keys
get 403)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from mercato.accounts import service as accounts
from mercato.accounts.errors import ApiKeyNotFound, InvalidApiKeyName, SessionRequired
from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.invocations import spend
from mercato.invocations.errors import RequestTooLarge
from mercato.web.api.schemas import (
    ApiKeyList,
    ApiKeySummary,
    CreatedApiKey,
    KeySpend,
    RevokedApiKey,
    SpendLimit,
)
from mercato.web.deps import runtime_of, session_principal
from mercato.web.problems import InvalidRequest, declare

router = APIRouter(tags=["api-keys"])

SessionPrincipal = Annotated[Principal, Depends(session_principal)]


class CreateKeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    spend_limit: SpendLimit | None = Field(default=None, alias="spendLimit")


def _limit(body: SpendLimit | None) -> tuple[int, spend.Period] | None:
    return None if body is None else (body.points, spend.Period(body.period))


def _wire_limit(found: spend.KeySpend) -> SpendLimit | None:
    limit = found.limit()
    return None if limit is None else SpendLimit.model_validate(limit)


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
    now = runtime.clock.now()
    limit = _limit(body.spend_limit)
    with runtime.db.transaction() as session:
        created = spend.create_key(
            session, account_id=principal.account_id, name=body.name, limit=limit, now=now
        )
    return CreatedApiKey(
        api_key=created.api_key,
        key_id=created.key_id,
        name=created.name,
        created_at=_iso(created.created_at),
        spend_limit=body.spend_limit,
    )


@router.get(
    "/v1/api-keys",
    response_description="The account's API keys (never the plaintext).",
    **declare(*_SESSION),
)
def list_keys(request: Request, principal: SessionPrincipal) -> ApiKeyList:
    runtime = runtime_of(request)
    now = runtime.clock.now()
    with runtime.db.read() as session:
        keys = accounts.list_api_keys(session, account_id=principal.account_id)
        items = []
        for key in keys:
            found = spend.spend_of(key, now)
            items.append(
                ApiKeySummary(
                    key_id=key.id,
                    name=key.name,
                    created_at=_iso(key.created_at),
                    last_used_at=_iso(key.last_used_at),
                    revoked_at=_iso(key.revoked_at),
                    spend_limit=_wire_limit(found),
                    spent_in_period=found.spent_in_period,
                    period_resets_at=_iso(found.period_resets_at),
                )
            )
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


def _set(
    request: Request, principal: Principal, key_id: str, limit: tuple[int, spend.Period] | None
) -> KeySpend:
    runtime = runtime_of(request)
    with runtime.db.transaction() as session:
        found = spend.set_limit(
            session,
            key_id=key_id,
            account_id=principal.account_id,
            limit=limit,
            now=runtime.clock.now(),
        )
    return KeySpend(
        key_id=key_id,
        spend_limit=_wire_limit(found),
        spent_in_period=found.spent_in_period,
        period_resets_at=_iso(found.period_resets_at),
    )


@router.put(
    "/v1/api-keys/{key_id}/spend-limit",
    response_description="The key's new limit, with its use counted again from its calls.",
    **declare(InvalidRequest, RequestTooLarge, *_SESSION, ApiKeyNotFound, path_params=True),
)
def put_spend_limit(
    key_id: str, body: SpendLimit, request: Request, principal: SessionPrincipal
) -> KeySpend:
    return _set(request, principal, key_id, _limit(body))


@router.delete(
    "/v1/api-keys/{key_id}/spend-limit",
    response_description="The key has no limit any more.",
    **declare(*_SESSION, ApiKeyNotFound, path_params=True),
)
def delete_spend_limit(key_id: str, request: Request, principal: SessionPrincipal) -> KeySpend:
    return _set(request, principal, key_id, None)
