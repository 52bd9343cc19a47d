"""Browser sessions: sign-up, login, cookies, transparent refresh, reuse, logout, CSRF."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from builders.accounts import bearer
from builders.invocation_world import World
from builders.pages import OTHER, PERSON, Browser, field_error, title
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.web.pages.common import ACCESS_COOKIE, CSRF_COOKIE, REFRESH_COOKIE


def _set_cookie_headers(response) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {h.split("=", 1)[0]: h for h in response.headers.get_list("set-cookie")}


def test_sign_up_opens_a_session_in_http_only_same_site_cookies(world: World) -> None:
    browser = Browser(world)
    page = browser.get("/signup")
    assert page.status_code == 200 and title(page) == "Sign up · Mercato"
    assert '<label for="f-email">' in page.text and '<label for="f-password">' in page.text

    done = browser.post("/signup", {"email": "new@example.com", "password": "long enough pw"})
    assert done.status_code == 303 and done.headers["location"].startswith("/")
    cookies = _set_cookie_headers(done)
    for name in (ACCESS_COOKIE, REFRESH_COOKIE, CSRF_COOKIE):
        assert "HttpOnly" in cookies[name] and "SameSite=lax" in cookies[name]
        assert "Secure" not in cookies[name]  # dev runs on plain http
    account = browser.get("/account")
    assert account.status_code == 200 and "new@example.com" in account.text


def test_sign_up_errors_are_shown_next_to_their_field(world: World) -> None:
    browser = Browser(world)
    browser.get("/signup")
    short = browser.post("/signup", {"email": "x@example.com", "password": "short"})
    assert short.status_code == 400 and "at least 8" in field_error(short, "password")
    bad = browser.post("/signup", {"email": "not-an-email", "password": "long enough pw"})
    assert bad.status_code == 400 and field_error(bad, "email")
    assert 'aria-invalid="true" aria-describedby="email-error"' in bad.text


def test_wrong_password_is_refused_next_to_the_password(world: World, people: object) -> None:
    browser = Browser(world)
    browser.get("/login")
    refused = browser.post("/login", {"email": PERSON, "password": "wrong password!"})
    assert refused.status_code == 400
    assert "not right" in field_error(refused, "password")
    assert browser.cookie(ACCESS_COOKIE) is None


def test_cookies_are_secure_outside_dev(db_url: str, tmp_path: Path, people: object) -> None:
    settings = Settings(
        env="production", secret_key="s" * 40, data_dir=tmp_path / "p", database_url=db_url
    )
    runtime = Runtime.from_settings(settings)
    try:
        with TestClient(create_app(runtime), base_url="https://testserver") as http:
            page = http.get("/login")
            token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
            done = http.post(
                "/login",
                data={
                    "csrf_token": token,
                    "email": PERSON,
                    "password": "correct horse battery staple",
                },
                follow_redirects=False,
            )
            assert done.status_code == 303
            cookies = _set_cookie_headers(done)
            assert all("Secure" in cookies[n] for n in (ACCESS_COOKIE, REFRESH_COOKIE))
    finally:
        runtime.db.dispose()


def test_expired_access_cookie_is_refreshed_transparently(world: World, person: Browser) -> None:
    first_refresh = person.cookie(REFRESH_COOKIE)
    world.clock.advance(world.runtime.settings.access_token_ttl_seconds + 5)
    page = person.get("/account")
    assert page.status_code == 200 and PERSON in page.text
    assert person.cookie(REFRESH_COOKIE) not in (None, first_refresh)  # rotated on use
    assert ACCESS_COOKIE in _set_cookie_headers(page)


def test_replaying_a_rotated_refresh_token_ends_the_whole_family(
    world: World, person: Browser
) -> None:
    stolen = person.cookie(REFRESH_COOKIE)
    assert stolen is not None
    world.clock.advance(world.runtime.settings.access_token_ttl_seconds + 5)
    assert person.get("/account").status_code == 200  # the browser rotates the token
    current_access = person.cookie(ACCESS_COOKIE)
    assert current_access is not None

    attacker = Browser(world)
    attacker.http.cookies.set(REFRESH_COOKIE, stolen)
    replay = attacker.get("/account")
    assert replay.status_code == 303 and replay.headers["location"].startswith("/login")

    # Every session of that family is over: the legitimate browser's fresh tokens too.
    assert world.client.get("/v1/me", headers=bearer(current_access)).status_code == 401
    again = person.get("/account")
    assert again.status_code == 303 and again.headers["location"].startswith("/login")


def test_logout_revokes_the_session(world: World, person: Browser) -> None:
    access = person.cookie(ACCESS_COOKIE)
    assert access is not None
    assert world.client.get("/v1/me", headers=bearer(access)).status_code == 200
    person.get("/account")
    done = person.post("/logout")
    assert done.status_code == 303 and done.headers["location"].startswith("/login")
    assert world.client.get("/v1/me", headers=bearer(access)).status_code == 401
    assert person.get("/account").status_code == 303


def test_login_follows_only_same_site_next(world: World, people: object) -> None:
    browser = Browser(world)
    assert browser.get("/account").headers["location"] == "/login?next=/account"
    browser.get("/login?next=/account")
    done = browser.post(
        "/login",
        {"email": OTHER, "password": "correct horse battery staple", "next": "//evil.example"},
    )
    assert done.headers["location"] == "/"


POSTS = [
    "/signup",
    "/login",
    "/logout",
    "/account/api-keys",
    "/account/api-keys/key_x/revoke",
    "/listings/acme.echo/versions/v1/call",
    "/listings/acme.echo/report",
    "/receipts/inv_x/dispute",
    "/provider/connections",
    "/provider/connections/conn_x",
    "/provider/connections/conn_x/check",
    "/provider/listings",
    "/provider/listings/acme.echo/drafts",
    "/provider/versions/ver_x",
    "/provider/versions/ver_x/submit",
    "/staff/connections/conn_x/approve",
    "/staff/versions/ver_x/publish",
    "/staff/cases/case_x/decide",
    "/staff/holds",
    "/staff/holds/hold_x/release",
    "/staff/grants",
]


def test_every_form_post_without_a_valid_csrf_token_is_refused(
    world: World, staff: Browser
) -> None:
    other = Browser(world)
    other.get("/login")
    for path in POSTS:
        missing = staff.post(path, {"name": "x"}, csrf=False)
        assert missing.status_code == 403, path
        assert title(missing) == "Form refused · Mercato"
        forged = staff.http.post(path, data={"csrf_token": "0" * 64}, follow_redirects=False)
        assert forged.status_code == 403, path
        # A token from another browser does not fit this browser's cookie either.
        foreign = staff.http.post(path, data={"csrf_token": other.csrf}, follow_redirects=False)
        assert foreign.status_code == 403, path
