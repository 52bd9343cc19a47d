"""Login throttling (DESIGN.md §8, decision 0220): per (email, address) and per address; per
email only a delay that the owner's right password from a clean address never meets."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from builders.accounts import DEFAULT_PASSWORD, make_account
from mercato.accounts import service
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime
from mercato.db.uow import Database
from mercato.settings import Settings
from mercato.web.app import create_app

OWNER = "owner@example.com"
WRONG = "not the password"


def _from(app: FastAPI, address: str) -> TestClient:
    """A client whose requests arrive from `address` (the TCP peer the server sees)."""
    return TestClient(app, client=(address, 40000), raise_server_exceptions=False)


def _login(
    app: FastAPI,
    address: str,
    email: str = OWNER,
    password: str = WRONG,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    body = {"email": email, "password": password}
    return _from(app, address).post("/v1/auth/login", json=body, headers=headers)


def _retry_after(response: httpx.Response) -> int:
    assert response.status_code == 429, response.text
    assert response.json()["code"] == "LOGIN_THROTTLED"
    return int(response.headers["retry-after"])


def test_the_owner_gets_in_from_a_clean_address_after_50_failures_from_others(
    client: TestClient, db: Database, settings: Settings, clock: FakeClock
) -> None:
    make_account(db, OWNER)
    app = client.app
    assert isinstance(app, FastAPI)
    for address in ("203.0.113.1", "203.0.113.2"):  # 2 x 10 failures: both pairs throttled
        for _ in range(settings.login_attempts_per_window):
            assert _login(app, address).status_code == 401
    for n in range(3, 33):  # 30 more, each from a fresh address
        assert _login(app, f"203.0.113.{n}").status_code == 401
    for n in range(1, 33):  # every attacking address now waits, even with the right password
        assert _retry_after(_login(app, f"203.0.113.{n}", password=DEFAULT_PASSWORD)) >= 1
    # 50 failures for the email: it is slowed, not locked. A clean address gets straight in.
    owner = _login(app, "198.51.100.7", password=DEFAULT_PASSWORD)
    assert owner.status_code == 200, owner.text
    assert owner.json()["accessToken"].startswith("mercato_at_")


def test_a_sprayed_email_only_delays_addresses_that_failed(
    client: TestClient, db: Database, settings: Settings, clock: FakeClock
) -> None:
    make_account(db, OWNER)
    app = client.app
    assert isinstance(app, FastAPI)
    for n in range(50):  # one failure each from 50 addresses: no pair or address limit is hit
        assert _login(app, f"203.0.113.{n + 1}").status_code == 401
    # An address that failed waits a short, bounded delay per attempt, whatever it sends...
    delay = _retry_after(_login(app, "203.0.113.1", password=DEFAULT_PASSWORD))
    assert 1 <= delay <= settings.login_email_delay_seconds
    clock.advance(delay - 1)
    assert _retry_after(_login(app, "203.0.113.2")) == 1
    clock.advance(1)
    assert _login(app, "203.0.113.2").status_code == 401  # one guess, then it waits again
    assert _retry_after(_login(app, "203.0.113.3")) == settings.login_email_delay_seconds
    # ...while a clean address is never delayed, even for a wrong password.
    assert _login(app, "198.51.100.7").status_code == 401
    # The owner who mistyped once (an address with a failure) gets in after the delay.
    clock.advance(_retry_after(_login(app, "198.51.100.7", password=DEFAULT_PASSWORD)))
    assert _login(app, "198.51.100.7", password=DEFAULT_PASSWORD).status_code == 200


def test_an_address_is_throttled_after_its_failures_whatever_the_email(
    client: TestClient, db: Database, settings: Settings, clock: FakeClock
) -> None:
    make_account(db, OWNER)
    app = client.app
    assert isinstance(app, FastAPI)
    limit = settings.login_address_attempts_per_window
    assert limit > settings.login_attempts_per_window
    for n in range(limit):  # a spray over many emails from one address
        assert _login(app, "203.0.113.9", email=f"user{n}@example.com").status_code == 401
    retry_after = _retry_after(_login(app, "203.0.113.9", password=DEFAULT_PASSWORD))
    assert 1 <= retry_after <= settings.login_window_seconds
    assert _login(app, "198.51.100.7", password=DEFAULT_PASSWORD).status_code == 200
    clock.advance(retry_after)
    assert _login(app, "203.0.113.9", password=DEFAULT_PASSWORD).status_code == 200


def test_unlock_lifts_the_emails_throttles(
    client: TestClient, db: Database, settings: Settings, clock: FakeClock
) -> None:
    make_account(db, OWNER)
    make_account(db, "bystander@example.com")
    app = client.app
    assert isinstance(app, FastAPI)
    for _ in range(settings.login_attempts_per_window):
        assert _login(app, "203.0.113.9").status_code == 401
        assert _login(app, "203.0.113.9", email="bystander@example.com").status_code == 401
    assert _retry_after(_login(app, "203.0.113.9", password=DEFAULT_PASSWORD))
    with db.transaction() as session:
        forgotten = service.unlock_login(session, email="Owner@Example.com", settings=settings)
    assert forgotten == 2 * settings.login_attempts_per_window  # the email's and its pair's
    assert _login(app, "203.0.113.9", password=DEFAULT_PASSWORD).status_code == 200
    # Another email's throttle is its own.
    bystander = _login(app, "203.0.113.9", "bystander@example.com", DEFAULT_PASSWORD)
    assert _retry_after(bystander)


@pytest.fixture
def behind_proxy(settings: Settings) -> Iterator[FastAPI]:
    """The app as deployed behind a proxy at 192.0.2.10 (MERCATO_TRUSTED_PROXIES)."""
    runtime = Runtime.from_settings(settings.model_copy(update={"trusted_proxies": "192.0.2.10"}))
    yield create_app(runtime)
    runtime.db.dispose()


def test_a_forwarded_address_counts_only_from_a_trusted_proxy(
    behind_proxy: FastAPI, db: Database, settings: Settings
) -> None:
    make_account(db, OWNER)
    limit = settings.login_attempts_per_window
    # An untrusted peer cannot pose as other clients: its forged header is ignored.
    for n in range(limit):
        forged = {"X-Forwarded-For": f"198.51.100.{n + 1}"}
        assert _login(behind_proxy, "203.0.113.9", headers=forged).status_code == 401
    forged = {"X-Forwarded-For": "198.51.100.99"}
    assert _retry_after(_login(behind_proxy, "203.0.113.9", headers=forged))
    # Through the trusted proxy each client is counted as itself.
    for _ in range(limit):
        proxied = {"X-Forwarded-For": "198.51.100.1"}
        assert _login(behind_proxy, "192.0.2.10", headers=proxied).status_code == 401
    assert _retry_after(
        _login(behind_proxy, "192.0.2.10", headers={"X-Forwarded-For": "198.51.100.1"})
    )
    other = {"X-Forwarded-For": "198.51.100.2"}
    answer = _login(behind_proxy, "192.0.2.10", password=DEFAULT_PASSWORD, headers=other)
    assert answer.status_code == 200, answer.text


def test_the_login_page_says_when_to_come_back(
    client: TestClient, db: Database, settings: Settings
) -> None:
    make_account(db, OWNER)
    browser = _from(client.app, "203.0.113.9")  # type: ignore[arg-type]
    token = re.compile(r'name="csrf_token" value="([^"]+)"')

    def post(password: str) -> httpx.Response:
        found = token.search(browser.get("/login").text)
        assert found is not None
        form = {"email": OWNER, "password": password, "csrf_token": found.group(1)}
        return browser.post("/login", data=form, follow_redirects=False)

    for _ in range(settings.login_attempts_per_window):
        assert post(WRONG).status_code == 400
    page = post(DEFAULT_PASSWORD)
    assert page.status_code == 429
    retry_after = page.headers["retry-after"]
    assert f"try again in {retry_after} seconds" in page.text
