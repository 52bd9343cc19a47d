"""Sign up, log in and log out: the browser side of the foundation's session families."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from mercato.accounts import flows as account_flows
from mercato.accounts import service as accounts
from mercato.accounts.errors import (
    AccountExists,
    InvalidEmail,
    InvalidPassword,
    SignupThrottled,
)
from mercato.accounts.schemas import IssuedTokens
from mercato.core.errors import MercatoError, RateLimited, Unauthenticated
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.web.deps import runtime_of
from mercato.web.pages.common import (
    ACCESS_COOKIE,
    REFRESH_COOKIE,
    Form,
    clear_session_cookies,
    current_user,
    redirect,
    render,
    renew_csrf,
    safe_next,
    set_session_cookies,
    text_of,
)

router = APIRouter(include_in_schema=False)

SIGNUP_MEMO = "sign-up"


@router.get("/signup")
def signup_page(request: Request) -> Response:
    return render(request, "signup.html", title="Sign up")


@router.post("/signup")
def signup(request: Request, form: Form) -> Response:
    email, password = text_of(form, "email").strip(), text_of(form, "password")
    errors: dict[str, str] = {}
    status, headers = 400, dict[str, str]()
    if len(password) < accounts.PASSWORD_MIN_LENGTH:
        errors["password"] = f"Use at least {accounts.PASSWORD_MIN_LENGTH} characters."
    elif len(password) > accounts.PASSWORD_MAX_LENGTH:
        errors["password"] = "That password is too long."
    if not errors:
        client_ip = request.client.host if request.client else None
        try:
            tokens, points = _sign_up(runtime_of(request), email, password, client_ip)
        except SignupThrottled as error:
            errors["email"] = error.message
            status, headers = 429, error.headers
        except (InvalidEmail, AccountExists) as error:
            errors["email"] = error.message
        except InvalidPassword as error:
            errors["password"] = error.message
        else:
            set_session_cookies(request, tokens)
            renew_csrf(request)
            if points:
                return redirect(request, f"/?points={points}", notice="signed-up")
            granted = not runtime_of(request).settings.signup_points
            return redirect(request, "/", notice="signed-up" if granted else "signed-up-no-points")
    page = render(
        request,
        "signup.html",
        status=status,
        title="Sign up",
        errors=errors,
        values={"email": email},
    )
    page.headers.update(headers)  # Retry-After when throttled
    return page


def _sign_up(
    runtime: Runtime, email: str, password: str, client_ip: str | None
) -> tuple[IssuedTokens, int]:
    """Make the account, grant its sign-up points, open its session: the session and the
    points granted (decisions 0527, 0528).

    The cheap refusals come before the Argon2 hash (a bad email, a throttled address: read
    without a lock), the hash outside any transaction (in the bounded pool, decision 0525),
    then one write transaction serialised with every other sign-up checks the throttle again,
    makes the account, grants the points the day's cap still allows and counts it all.
    """
    settings, now = runtime.settings, runtime.clock.now()
    subject = accounts.signup_subject(client_ip=client_ip, settings=settings)
    accounts.checked_email(email)
    with runtime.db.read() as session:
        accounts.check_signup_allowed(session, subject=subject, settings=settings, now=now)
    password_hash = accounts.hash_password(password, settings=settings)
    now = runtime.clock.now()
    with runtime.db.transaction() as session:
        points = accounts.start_signup(session, subject=subject, settings=settings, now=now)
        account = accounts.create_account(
            session,
            email=email,
            password=None,
            password_hash=password_hash,
            is_staff=False,
            now=now,
            settings=settings,
        )
        if points:
            ledger.grant(session, account_id=account.id, amount=points, now=now, memo=SIGNUP_MEMO)
        accounts.record_signup(
            session, subject=subject, account_id=account.id, points=points, now=now
        )
        tokens = accounts.start_session(session, account_id=account.id, settings=settings, now=now)
    return tokens, points


@router.get("/login")
def login_page(request: Request, next: str = "/") -> Response:
    return render(request, "login.html", title="Log in", next=safe_next(next))


@router.post("/login")
def login(request: Request, form: Form) -> Response:
    email, password = text_of(form, "email").strip(), text_of(form, "password")
    target = safe_next(text_of(form, "next") or "/")
    runtime = runtime_of(request)
    errors: dict[str, str] = {}
    status, headers = 400, dict[str, str]()
    try:
        tokens = account_flows.login(
            runtime.db,
            email=email,
            password=password,
            client_ip=request.client.host if request.client else None,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
    except RateLimited as error:
        errors["password"] = error.message
        status, headers = 429, error.headers
    except Unauthenticated:
        errors["password"] = "The email or the password is not right."
    except MercatoError as error:
        errors["email"] = error.message
    else:
        _end_current_session(request)
        set_session_cookies(request, tokens)
        renew_csrf(request)
        return redirect(request, target)
    page = render(
        request,
        "login.html",
        status=status,
        title="Log in",
        errors=errors,
        values={"email": email},
        next=target,
    )
    page.headers.update(headers)  # Retry-After when throttled
    return page


def _end_current_session(request: Request) -> None:
    """Revoke the family this browser was signed in with (logout, or a new login over it)."""
    user = current_user(request)
    runtime = runtime_of(request)
    family_id = user.principal.family_id if user is not None else None
    if family_id is None:
        refresh = request.cookies.get(REFRESH_COOKIE)
        if refresh:
            with runtime.db.read() as session:
                family_id = accounts.family_of_refresh_token(session, refresh_token=refresh)
    if family_id is not None:
        with runtime.db.transaction() as session:
            accounts.revoke_family(
                session, family_id=family_id, reason="LOGOUT", now=runtime.clock.now()
            )


@router.post("/logout")
def logout(request: Request, _form: Form) -> Response:
    if request.cookies.get(ACCESS_COOKIE) or request.cookies.get(REFRESH_COOKIE):
        _end_current_session(request)
    clear_session_cookies(request)
    renew_csrf(request)
    return redirect(request, "/login", notice="logged-out")
