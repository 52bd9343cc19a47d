"""Request dependencies shared by the API and pages."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session

from mercato.accounts import service as accounts
from mercato.accounts.errors import KeyDisproved, SessionRequired, StaffRequired
from mercato.accounts.schemas import Principal
from mercato.core.errors import Unauthenticated
from mercato.db.hints import served_on
from mercato.db.plans import AsyncConnection
from mercato.db.runtime import Runtime

_MAX_CREDENTIAL_LENGTH = 512


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def bearer_token(request: Request) -> str:
    """The token of `Authorization: Bearer <token>`, or Unauthenticated for anything else."""
    return bearer_token_of(request.headers.get("authorization"))


def bearer_token_of(header: str | None) -> str:
    """`bearer_token` of the request's (first) Authorization header's value, None when it has
    none."""
    if header is None:
        raise Unauthenticated("Send Authorization: Bearer <API key or access token>.")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("Use the Bearer authorization scheme.")
    # Starlette decodes header bytes as Latin-1; anything outside visible ASCII is malformed.
    if len(token) > _MAX_CREDENTIAL_LENGTH or not (token.isascii() and token.isprintable()):
        raise Unauthenticated("The credential is not valid.")
    if " " in token:
        raise Unauthenticated("The credential is not valid.")
    return token


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


async def principal_on(
    request: Request, conn: AsyncConnection, token: str, runtime: Runtime | None = None
) -> Principal:
    """`principal_in` on the event loop: the caller of `token` read on the route's own async
    read `conn` (the invoke route authenticates and reads the call's facts in one read).

    An API key's last use, when due, is NOT written here: a unit of work opened inside the
    read would wait for a second connection while holding the first, and under load every
    request would hold one and wait for another, for ever (the pool is bounded). The caller
    records it with `record_key_use` once its read has ended.

    `runtime`: the app's (`runtime_of(request)`), when the caller has it already."""
    if runtime is None:
        runtime = runtime_of(request)
    now = runtime.clock.now()
    if token.startswith(accounts.API_KEY_PREFIX):
        # From the process's memory when it has the key: the call's money write proves it
        # (decision 0400); any other answer proves it first (`flows`).
        hints = runtime.hints
        key = await accounts.hinted_api_key(conn, None if hints is None else hints.keys, token)
        principal = key.principal
        if accounts.touch_due(key.last_used_at, now) and principal.key_id:
            key.last_used_at = now  # this process's other calls need not record it again
            request.state.key_use_due = principal.key_id
    elif token.startswith(accounts.ACCESS_TOKEN_PREFIX):
        principal = await accounts.resolve_access_token.aio(
            conn, token=token, settings=runtime.settings, now=now
        )
    else:
        raise Unauthenticated("The credential is not valid.")
    # Into the request's state dict itself, as `request.state.principal = …` writes it, without
    # the property's first-use AttributeError and `State.__setattr__` (decision 0476).
    request.scope.setdefault("state", {})["principal"] = principal
    return principal


async def prove_served_key(conn: AsyncConnection) -> None:
    """Read the API key `principal_on` served from memory on `conn`, if it did: a refusal
    made after authentication must not answer a key that is revoked (or unknown) by now, so
    raise `KeyDisproved` (401 `UNAUTHENTICATED`, no quota headers: DESIGN.md §3 step 1
    comes first). A key read from the database on `conn` has been proven already."""
    served = served_on(conn)
    if served is None or served.key_digest is None:
        return
    try:
        await accounts.lookup_api_key_digest.aio(conn, digest=served.key_digest)
    except Unauthenticated as refused:
        raise KeyDisproved(refused) from None


async def record_key_use(request: Request) -> None:
    """Record the API key's last use that `principal_on` found due, in a transaction of its
    own; call it after the read `principal_on` ran in has ended (see there)."""
    # The request's state dict read directly: `getattr(request.state, ..., None)` raises and
    # formats an AttributeError inside starlette's State for every request that has none due.
    state = request.scope.get("state")
    key_id: str | None = None if state is None else state.get("key_use_due")
    if key_id is None:
        return
    request.state.key_use_due = None
    runtime = runtime_of(request)
    async with runtime.adb.transaction() as write:
        await accounts.touch_api_key.aio(write, key_id=key_id, now=runtime.clock.now())


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
