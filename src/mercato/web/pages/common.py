"""What every page shares: templates, the browser session on cookies, CSRF, responses.

The browser session is the foundation's session family: the access token and the refresh
token live in HttpOnly, SameSite=Lax cookies (Secure outside dev). When the access cookie is
missing or expired, the page layer spends the refresh token for a new pair before the page is
built; a replayed (already rotated) refresh token makes the accounts service revoke the whole
family, and the browser is sent to the login page. See docs/decisions/0120-0121.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from mercato.accounts import flows as account_flows
from mercato.accounts import service as accounts
from mercato.accounts.schemas import IssuedTokens, Principal
from mercato.catalog.schemas import ConnectionFacts
from mercato.core.errors import MercatoError, Unauthenticated
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.web.deps import runtime_of

ACCESS_COOKIE = "mercato_session"
REFRESH_COOKIE = "mercato_refresh"
CSRF_COOKIE = "mercato_csrf"
CSRF_FIELD = "csrf_token"

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).resolve().parent.parent / "templates"))


def points(amount: int) -> str:
    """'1 point', '10 points', '-1 point': a count of points as a person writes it."""
    return f"{amount} point" if abs(amount) == 1 else f"{amount} points"


TEMPLATES.env.filters["points"] = points


class LoginRequired(Exception):
    """The page needs a signed-in browser; the handler redirects to the login page."""


class PageForbidden(Exception):
    """The signed-in account may not see this page (e.g. staff only)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CsrfRefused(Exception):
    """A form post without a valid CSRF token."""


@dataclass(frozen=True)
class PageUser:
    principal: Principal
    email: str

    @property
    def account_id(self) -> str:
        return self.principal.account_id

    @property
    def is_staff(self) -> bool:
        return self.principal.is_staff


@dataclass
class _PageState:
    """Per-request: who is signed in and which cookies the response must set or clear."""

    resolved: bool = False
    user: PageUser | None = None
    cookies: list[tuple[str, str | None, int | None]] = field(default_factory=list)


def _state(request: Request) -> _PageState:
    state = getattr(request.state, "page", None)
    if not isinstance(state, _PageState):
        state = _PageState()
        request.state.page = state
    return state


def _secure(request: Request) -> bool:
    return runtime_of(request).settings.env != "dev"


# --- cookies -----------------------------------------------------------------------------


def _queue_cookie(
    request: Request, name: str, value: str | None, max_age: int | None = None
) -> None:
    _state(request).cookies.append((name, value, max_age))


def set_session_cookies(request: Request, tokens: IssuedTokens) -> None:
    settings = runtime_of(request).settings
    _queue_cookie(request, ACCESS_COOKIE, tokens.access_token, tokens.expires_in)
    _queue_cookie(request, REFRESH_COOKIE, tokens.refresh_token, settings.refresh_token_ttl_seconds)


def clear_session_cookies(request: Request) -> None:
    _queue_cookie(request, ACCESS_COOKIE, None)
    _queue_cookie(request, REFRESH_COOKIE, None)


def finish(request: Request, response: Response) -> Response:
    """Apply the queued cookies and the page's security headers to the response."""
    secure = _secure(request)
    for name, value, max_age in _state(request).cookies:
        if value is None:
            response.delete_cookie(name, path="/", secure=secure, httponly=True, samesite="lax")
        else:
            response.set_cookie(
                name,
                value,
                max_age=max_age,
                path="/",
                secure=secure,
                httponly=True,
                samesite="lax",
            )
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    )
    return response


# --- CSRF (signed double-submit cookie) --------------------------------------------------


def _csrf_mac(request: Request, nonce: str) -> str:
    key = runtime_of(request).settings.derived_key("page-csrf")
    return hmac.new(key, nonce.encode("ascii", "replace"), hashlib.sha256).hexdigest()


def csrf_token(request: Request) -> str:
    """The form token of this browser: an HMAC of its CSRF cookie (set now when missing)."""
    state = _state(request)
    nonce = getattr(request.state, "csrf_nonce", None) or request.cookies.get(CSRF_COOKIE)
    if not nonce or len(nonce) > 100:
        nonce = secrets.token_urlsafe(32)
        state.cookies.append((CSRF_COOKIE, nonce, None))
    request.state.csrf_nonce = nonce
    return _csrf_mac(request, nonce)


def renew_csrf(request: Request) -> None:
    """Give the browser a fresh CSRF nonce (on login and logout)."""
    nonce = secrets.token_urlsafe(32)
    request.state.csrf_nonce = nonce
    _queue_cookie(request, CSRF_COOKIE, nonce)


async def checked_form(request: Request) -> FormData:
    """The posted form, after its CSRF token was checked against the browser's cookie."""
    form = await request.form()
    nonce = request.cookies.get(CSRF_COOKIE)
    sent = form.get(CSRF_FIELD)
    if not nonce or not isinstance(sent, str) or not sent:
        raise CsrfRefused()
    if not hmac.compare_digest(_csrf_mac(request, nonce), sent):
        raise CsrfRefused()
    return form


Form = Annotated[FormData, Depends(checked_form)]


def text_of(form: FormData, name: str) -> str:
    """A text field of the form ('' when missing or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


# --- who is signed in --------------------------------------------------------------------


def _principal_of_access(request: Request, token: str) -> PageUser | None:
    runtime = runtime_of(request)
    try:
        with runtime.db.read() as session:
            principal = accounts.resolve_access_token(
                session, token=token, settings=runtime.settings, now=runtime.clock.now()
            )
            email = accounts.get_account(session, account_id=principal.account_id).email
    except Unauthenticated:
        return None
    return PageUser(principal=principal, email=email)


def _refreshed(request: Request, refresh_token: str) -> PageUser | None:
    runtime = runtime_of(request)
    try:
        tokens = account_flows.refresh(
            runtime.db,
            refresh_token=refresh_token,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
    except Unauthenticated:  # unknown, expired, revoked, or reused (family now revoked)
        clear_session_cookies(request)
        return None
    set_session_cookies(request, tokens)
    return _principal_of_access(request, tokens.access_token)


def current_user(request: Request) -> PageUser | None:
    """The signed-in account, refreshing the session transparently; None when signed out."""
    state = _state(request)
    if state.resolved:
        return state.user
    state.resolved = True
    access = request.cookies.get(ACCESS_COOKIE)
    user = _principal_of_access(request, access) if access else None
    if user is None:
        refresh = request.cookies.get(REFRESH_COOKIE)
        if refresh:
            user = _refreshed(request, refresh)
        elif access:
            clear_session_cookies(request)
    state.user = user
    return user


def require_user(request: Request) -> PageUser:
    user = current_user(request)
    if user is None:
        raise LoginRequired()
    return user


def require_staff(request: Request) -> PageUser:
    user = require_user(request)
    if not user.is_staff:
        raise PageForbidden("This page is for staff only.")
    return user


User = Annotated[PageUser, Depends(require_user)]
Staff = Annotated[PageUser, Depends(require_staff)]


# --- responses ---------------------------------------------------------------------------


def render(
    request: Request, template: str, *, title: str, status: int = 200, **context: Any
) -> Response:
    """Render a page with the signed-in user, a CSRF token and the notice from the query.

    Every page has a title (a required argument, so mypy finds a page without one)."""
    context["title"] = title
    context.setdefault("errors", {})
    context.setdefault("values", {})
    user = context["user"] = current_user(request)
    context["csrf_token"] = csrf_token(request)
    context["notice"] = _notice(request)
    # A server-side failure's page reads nothing more: the store may be what failed.
    if user is not None and "header_balance" not in context and status < 500:
        with runtime_of(request).db.read() as session:
            context["header_balance"] = ledger.balances(session, account_id=user.account_id)
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=status)
    return finish(request, response)


def redirect(request: Request, url: str, *, notice: str | None = None) -> Response:
    """A 303 See Other after a successful post (the notice is one of NOTICES' keys)."""
    if notice is not None:
        url += ("&" if "?" in url else "?") + "notice=" + quote(notice)
    return finish(request, RedirectResponse(url, status_code=303))


def login_redirect(request: Request) -> Response:
    target = request.url.path
    if request.url.query:
        target += "?" + request.url.query
    if request.method != "GET":
        target = "/"
    return finish(request, RedirectResponse("/login?next=" + quote(target), status_code=303))


def safe_next(value: str) -> str:
    """Only same-site paths are followed after login."""
    if value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def new_idempotency_key() -> str:
    return f"web-{uuid.uuid4().hex}"


def error_text(error: MercatoError) -> str:
    """A person-readable message for a service error."""
    return error.message


def _notice(request: Request) -> str | None:
    """The notice named in the query; sign-up's says how many points arrived (`points=N`)."""
    name = request.query_params.get("notice", "")
    granted = request.query_params.get("points", "")
    if name == "signed-up" and granted.isascii() and granted.isdigit() and len(granted) < 16:
        return f"Welcome! Your account is ready, and {points(int(granted))} arrived to spend."
    return NOTICES.get(name)


NOTICES = {
    "signed-up": "Welcome! Your account is ready.",
    "signed-up-no-points": (
        "Welcome! Your account is ready. Today's sign-up points have all been given out, so it "
        "starts without points."
    ),
    "logged-out": "You have been signed out.",
    "key-revoked": "The API key was revoked. It can no longer be used.",
    "connection-created": "Connection created; the conformance check has run.",
    "connection-changed": "Connection changed; approval lapsed and the check has run again.",
    "connection-unchanged": "Nothing changed.",
    "check-ran": "The conformance check has run.",
    "listing-created": "Listing created. Add a draft version next.",
    "publisher-named": "Publisher name saved; callers see it on the listing and its card.",
    "draft-created": "Draft version created.",
    "draft-saved": "Draft saved.",
    "submitted": "Submitted for review with your connection's latest conformance run.",
    "version-approved": "Version approved; it can be published now.",
    "changes-requested": "Changes requested; the provider sees your reason.",
    "approved": "Connection approved.",
    "published": "Version published.",
    "decided": "Decision recorded.",
    "hold-placed": "Hold placed; the listing is out of the catalog.",
    "hold-released": "Hold released.",
    "granted": "Points granted.",
    "dispute-opened": "Dispute opened. Staff will look at it.",
    "report-sent": "Report sent. Staff will look at it.",
}


def connection_facts(session: Session, *, connection_id: str) -> ConnectionFacts:
    """What the catalog needs about a connection, read from the providers domain."""
    connection = providers.get_connection(session, connection_id=connection_id)
    return ConnectionFacts(
        connection_id=connection.id,
        owner_id=connection.owner_id,
        approved=providers.is_approved(session, connection_id=connection.id),
    )
