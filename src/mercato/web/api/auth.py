"""Sessions for programs: login, refresh, logout, and who am I."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mercato.accounts import flows
from mercato.accounts import service as accounts
from mercato.accounts.errors import (
    InvalidCredentials,
    InvalidRefreshToken,
    LoginThrottled,
    SessionRequired,
)
from mercato.accounts.schemas import IssuedTokens, Principal
from mercato.core.errors import Unauthenticated
from mercato.invocations.errors import RequestTooLarge
from mercato.web.api.schemas import Me, TokenPair
from mercato.web.deps import runtime_of, session_principal
from mercato.web.problems import InvalidRequest, declare

router = APIRouter(tags=["auth"])


class LoginBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(min_length=1, max_length=254)
    password: str = Field(min_length=1, max_length=accounts.PASSWORD_MAX_LENGTH)


class RefreshBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    refresh_token: str = Field(alias="refreshToken", min_length=1, max_length=512)


class LogoutBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    refresh_token: str | None = Field(default=None, alias="refreshToken", max_length=512)


def _pair(tokens: IssuedTokens) -> TokenPair:
    return TokenPair(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_in=tokens.expires_in,
        token_type="Bearer",
    )


@router.post(
    "/v1/auth/login",
    response_description="A new session.",
    **declare(
        InvalidRequest,
        RequestTooLarge,
        InvalidCredentials,
        LoginThrottled,
        headers={429: ("Retry-After",)},
        auth=False,
    ),
)
def login(body: LoginBody, request: Request) -> TokenPair:
    runtime = runtime_of(request)
    tokens = flows.login(
        runtime.db,
        email=body.email,
        password=body.password,
        client_ip=request.client.host if request.client else None,
        settings=runtime.settings,
        now=runtime.clock.now(),
    )
    return _pair(tokens)


@router.post(
    "/v1/auth/refresh",
    response_description="The rotated token pair.",
    **declare(InvalidRequest, RequestTooLarge, InvalidRefreshToken, auth=False),
)
def refresh(body: RefreshBody, request: Request) -> TokenPair:
    runtime = runtime_of(request)
    tokens = flows.refresh(
        runtime.db,
        refresh_token=body.refresh_token,
        settings=runtime.settings,
        now=runtime.clock.now(),
    )
    return _pair(tokens)


@router.post(
    "/v1/auth/logout",
    status_code=204,
    response_class=Response,
    response_description="The session family is revoked.",
    **declare(
        InvalidRequest, RequestTooLarge, Unauthenticated, SessionRequired, InvalidRefreshToken
    ),
)
def logout(request: Request, body: LogoutBody | None = None) -> Response:
    """End the session family named by the body's refresh token or the Bearer access token."""
    runtime = runtime_of(request)
    if body is not None and body.refresh_token is not None:
        with runtime.db.read() as session:
            family_id = accounts.family_of_refresh_token(session, refresh_token=body.refresh_token)
        if family_id is None:
            raise InvalidRefreshToken()
    elif request.headers.get("authorization") is not None:
        family_id = session_principal(request).family_id
    else:
        raise Unauthenticated("Send the refresh token or the access token of the session.")
    assert family_id is not None
    with runtime.db.transaction() as session:
        accounts.revoke_family(
            session, family_id=family_id, reason="LOGOUT", now=runtime.clock.now()
        )
    return Response(status_code=204)


@router.get(
    "/v1/me",
    response_description="The session's account (API keys get 403).",
    **declare(Unauthenticated, SessionRequired),
)
def me(request: Request, principal: Annotated[Principal, Depends(session_principal)]) -> Me:
    """The session's own account (an API key gets 403 SESSION_REQUIRED)."""
    with runtime_of(request).db.read() as session:
        account = accounts.get_account(session, account_id=principal.account_id)
        email = account.email
    return Me(
        account_id=principal.account_id,
        email=email,
        is_staff=principal.is_staff,
        channel=principal.channel,
    )
