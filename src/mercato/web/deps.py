"""Request dependencies shared by the API and pages."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session

from mercato.accounts import service as accounts
from mercato.accounts.errors import SessionRequired, StaffRequired
from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.db.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def bearer_token(request: Request) -> str:
    """The token of `Authorization: Bearer <token>`, or Unauthenticated for anything else."""
    return accounts.bearer_token_of(request.headers.get("authorization"))


def current_principal(request: Request) -> Principal:
    """Resolve the caller from an API key or a session access token (401 otherwise)."""
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    token = bearer_token(request)  # a malformed credential is refused before any database work
    with runtime_of(request).db.read() as session:
        return principal_in(request, session, token)


def principal_in(request: Request, session: Session, token: str) -> Principal:
    """The caller of `token` (from `bearer_token`), read in the request's own read session
    `session`, so that a route can read the caller and its own facts in one session (the
    invoke route does); remembered on the request like `current_principal`'s."""
    runtime = runtime_of(request)
    now = runtime.clock.now()
    if token.startswith(accounts.API_KEY_PREFIX):
        principal = accounts.authenticate_api_key(runtime.db, session, api_key=token, now=now)
    elif token.startswith(accounts.ACCESS_TOKEN_PREFIX):
        principal = accounts.resolve_access_token(
            session, token=token, settings=runtime.settings, now=now
        )
    else:
        raise Unauthenticated("The credential is not valid.")
    request.state.principal = principal
    return principal


def session_principal(request: Request) -> Principal:
    """Like current_principal, but API keys are refused with 403 SESSION_REQUIRED."""
    principal = current_principal(request)
    if principal.channel != "SESSION":
        raise SessionRequired("API keys can only call services; log in for this.")
    return principal


def staff_principal(request: Request) -> Principal:
    """A staff member's session; anyone else gets 403."""
    principal = session_principal(request)
    if not principal.is_staff:
        raise StaffRequired()
    return principal
