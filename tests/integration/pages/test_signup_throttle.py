"""Sign-up points cannot be farmed (DESIGN.md §8, issue 39 item 5): sign-ups are throttled per
client address (429 `SIGNUP_THROTTLED` + Retry-After, `MERCATO_SIGNUP_PER_ADDRESS_PER_HOUR`),
and the sign-up grants of one UTC day stop at `MERCATO_SIGNUP_POINTS_DAILY_CAP` (decisions
0527, 0528), both counted atomically: concurrent sign-ups pass neither, on either store."""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from mercato.accounts.models import Account
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerTransfer
from mercato.settings import Settings
from mercato.web.app import create_app

PASSWORD = "long enough pw"
ATTACKER = "203.0.113.9"
WAIT = 60.0  # seconds a synchronisation may take before the test fails (never slept)
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
# Late on a UTC day: the next day (and its fresh grant budget) is two minutes away.
LATE = dt.datetime(2026, 12, 7, 23, 58, tzinfo=dt.UTC)

Platform = tuple[FastAPI, Runtime, FakeClock]


@pytest.fixture
def platform(settings: Settings) -> Iterator[Callable[..., Platform]]:
    """An app on the test's database with the given settings, on a clock of its own."""
    runtimes: list[Runtime] = []

    def make(**updates: Any) -> Platform:
        runtime = Runtime.from_settings(settings.model_copy(update=updates))
        clock = FakeClock(LATE)
        runtime.clock = clock
        runtimes.append(runtime)
        return create_app(runtime), runtime, clock

    yield make
    for runtime in runtimes:
        runtime.db.dispose()


class SignupForm:
    """One browser at `address` with the sign-up page's CSRF token in hand."""

    def __init__(self, app: FastAPI, address: str, headers: dict[str, str] | None = None) -> None:
        self.http = TestClient(
            app, client=(address, 40000), headers=headers, raise_server_exceptions=False
        )
        found = _CSRF.search(self.http.get("/signup").text)
        assert found is not None
        self.csrf = found.group(1)

    def submit(self, email: str) -> httpx.Response:
        form = {"email": email, "password": PASSWORD, "csrf_token": self.csrf}
        return self.http.post("/signup", data=form, follow_redirects=False)


def _at_once(forms: list[SignupForm], emails: list[str]) -> list[httpx.Response]:
    start = threading.Barrier(len(forms))

    def one(n: int) -> httpx.Response:
        start.wait(WAIT)
        return forms[n].submit(emails[n])

    with ThreadPoolExecutor(len(forms)) as pool:
        return list(pool.map(one, range(len(forms))))


def _accounts(runtime: Runtime) -> int:
    with runtime.db.read() as session:
        return int(session.scalar(select(func.count()).select_from(Account)) or 0)


def _granted(runtime: Runtime) -> list[int]:
    """The points of every sign-up grant, and the ledger still balanced."""
    with runtime.db.read() as session:
        assert ledger.verify(session).balanced
        ids = session.scalars(select(Account.id).order_by(Account.email)).all()
        grants = session.scalar(select(func.count()).where(LedgerTransfer.memo == "sign-up"))
        points = [ledger.balances(session, account_id=i).available for i in ids]
    assert grants == len([p for p in points if p])
    return points


def _throttled(response: httpx.Response) -> int:
    assert response.status_code == 429, response.text[:500]
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 3600
    assert f"try again in {retry_after} seconds" in response.text
    return retry_after


def test_an_address_makes_three_accounts_an_hour(platform: Callable[..., Platform]) -> None:
    app, runtime, clock = platform(signup_points=100)

    def sign_up(email: str, address: str = ATTACKER) -> httpx.Response:
        return SignupForm(app, address).submit(email)

    for n in range(3):
        assert sign_up(f"farm{n}@example.com").status_code == 303
    retry_after = _throttled(sign_up("farm3@example.com"))
    assert _accounts(runtime) == 3  # the refusal made nothing
    assert _granted(runtime) == [100, 100, 100]
    # Another address is not affected; the throttled one is let in once the hour has passed.
    assert sign_up("owner@example.com", "198.51.100.7").status_code == 303
    clock.advance(retry_after - 1)
    _throttled(sign_up("farm3@example.com"))
    clock.advance(1)
    assert sign_up("farm3@example.com").status_code == 303
    assert _accounts(runtime) == 5


def test_concurrent_sign_ups_from_one_address_make_only_the_limit(
    platform: Callable[..., Platform],
) -> None:
    app, runtime, _clock = platform(signup_points=100)
    forms = [SignupForm(app, ATTACKER) for _ in range(12)]
    responses = _at_once(forms, [f"farm{n}@example.com" for n in range(12)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [303] * 3 + [429] * 9
    for response in responses:
        if response.status_code == 429:
            _throttled(response)
    assert _accounts(runtime) == 3
    assert _granted(runtime) == [100, 100, 100]


def test_the_days_grants_stop_at_the_cap_under_concurrency(
    platform: Callable[..., Platform],
) -> None:
    app, runtime, clock = platform(signup_points=40, signup_points_daily_cap=100)
    forms = [SignupForm(app, f"203.0.113.{n + 1}") for n in range(6)]
    responses = _at_once(forms, [f"user{n}@example.com" for n in range(6)])
    assert [r.status_code for r in responses] == [303] * 6  # every account is made...
    assert sorted(_granted(runtime)) == [0, 0, 0, 0, 40, 40]  # ...two grants fit in 100
    # The page says so to those who got nothing.
    told = [
        form.http.get(response.headers["location"]).text
        for form, response in zip(forms, responses, strict=True)
    ]
    assert sum("sign-up points have all been given out" in page for page in told) == 4
    # A new UTC day has a budget of its own.
    clock.advance(120)
    assert SignupForm(app, "198.51.100.7").submit("tomorrow@example.com").status_code == 303
    assert sorted(_granted(runtime)) == [0, 0, 0, 0, 40, 40, 40]


def test_the_cap_defaults_to_a_hundred_grants(settings: Settings) -> None:
    assert settings.model_copy(update={"signup_points": 100}).signup_daily_cap == 10_000
    assert settings.signup_daily_cap == 0


def test_behind_a_proxy_each_forwarded_client_counts_as_itself(
    platform: Callable[..., Platform],
) -> None:
    app, runtime, _clock = platform(trusted_proxies="192.0.2.10")
    # An untrusted peer's forged header is ignored: all its sign-ups count as its own.
    for n in range(3):
        forged = SignupForm(app, ATTACKER, {"X-Forwarded-For": f"198.51.100.{n + 1}"})
        assert forged.submit(f"forged{n}@example.com").status_code == 303
    _throttled(SignupForm(app, ATTACKER, {"X-Forwarded-For": "198.51.100.99"}).submit("x@e.com"))
    # Through the trusted proxy, clients are counted one by one.
    for n in range(4):
        proxied = SignupForm(app, "192.0.2.10", {"X-Forwarded-For": f"198.51.100.{n + 1}"})
        assert proxied.submit(f"proxied{n}@example.com").status_code == 303
    assert _accounts(runtime) == 7
