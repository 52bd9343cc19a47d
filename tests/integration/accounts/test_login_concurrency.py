"""Concurrent logins never pass the throttle (DESIGN.md §8, issue 39 item 4): an attempt is
counted before its password is verified, atomically on both stores, and Argon2 runs in a
bounded pool (decisions 0525, 0526). Verifications are counted at argon2's own
`PasswordHasher.verify`, the one call that costs the memory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from fastapi import FastAPI
from fastapi.testclient import TestClient

from builders.accounts import DEFAULT_PASSWORD, make_account
from mercato.accounts import service
from mercato.db.runtime import Runtime
from mercato.db.uow import Database
from mercato.settings import Settings
from mercato.web.app import create_app

OWNER = "owner@example.com"
WRONG = "not the password"
ATTACKER = "203.0.113.9"
WAIT = 60.0  # seconds a synchronisation may take before the test fails (never slept)


@dataclass
class Verifications:
    """Calls of argon2's `PasswordHasher.verify`, counted; `gate` (when set) holds each one
    until it is opened."""

    count: int = 0
    inside: int = 0
    most_inside: int = 0
    gate: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> Verifications:
    seen = Verifications()
    real = PasswordHasher.verify

    def counted(self: PasswordHasher, hash: str | bytes, password: str | bytes) -> Any:
        with seen.lock:
            seen.count += 1
            seen.inside += 1
            seen.most_inside = max(seen.most_inside, seen.inside)
        try:
            if seen.gate is not None:
                assert seen.gate.wait(WAIT)
            return real(self, hash, password)
        finally:
            with seen.lock:
                seen.inside -= 1

    monkeypatch.setattr(PasswordHasher, "verify", counted)
    return seen


def _at_once(app: FastAPI, logins: list[tuple[str, str, str]]) -> list[httpx.Response]:
    """POST every (address, email, password) login at the same moment, each from its address."""
    clients = [
        TestClient(app, client=(address, 40000), raise_server_exceptions=False)
        for address, _, _ in logins
    ]
    start = threading.Barrier(len(logins))

    def one(n: int) -> httpx.Response:
        _address, email, password = logins[n]
        start.wait(WAIT)
        body = {"email": email, "password": password}
        return clients[n].post("/v1/auth/login", json=body)

    with ThreadPoolExecutor(len(logins)) as pool:
        return list(pool.map(one, range(len(logins))))


def _statuses(responses: list[httpx.Response]) -> dict[int, int]:
    counted: dict[int, int] = {}
    for response in responses:
        counted[response.status_code] = counted.get(response.status_code, 0) + 1
    return counted


def _throttled_properly(responses: list[httpx.Response]) -> None:
    for response in responses:
        if response.status_code == 429:
            problem = response.json()
            assert problem["code"] == "LOGIN_THROTTLED"
            assert int(response.headers["retry-after"]) >= 1
            assert problem["retryAfter"] == int(response.headers["retry-after"])


def test_forty_wrong_passwords_at_once_verify_only_the_pairs_limit(
    client: TestClient, db: Database, settings: Settings, verifications: Verifications
) -> None:
    make_account(db, OWNER)
    app = client.app
    assert isinstance(app, FastAPI)
    limit = settings.login_attempts_per_window
    flood = [(ATTACKER, OWNER, WRONG)] * 40
    # The owner's right password from a clean address, sent in the same instant.
    responses = _at_once(app, [*flood, ("198.51.100.7", OWNER, DEFAULT_PASSWORD)])
    assert responses[-1].status_code == 200, responses[-1].text
    assert _statuses(responses[:-1]) == {401: limit, 429: 40 - limit}
    assert verifications.count == limit + 1  # the limit's, and the owner's
    _throttled_properly(responses)


def test_forty_emails_at_once_from_one_address_verify_only_the_address_limit(
    client: TestClient, db: Database, settings: Settings, verifications: Verifications
) -> None:
    make_account(db, OWNER)
    app = client.app
    assert isinstance(app, FastAPI)
    limit = settings.login_address_attempts_per_window
    spray = [(ATTACKER, f"user{n}@example.com", WRONG) for n in range(limit + 10)]
    responses = _at_once(app, spray)
    assert _statuses(responses) == {401: limit, 429: 10}
    assert verifications.count == limit
    _throttled_properly(responses)
    # The address is spent, the owner elsewhere is not.
    again = _at_once(
        app, [(ATTACKER, OWNER, DEFAULT_PASSWORD), ("198.51.100.7", OWNER, DEFAULT_PASSWORD)]
    )
    assert [r.status_code for r in again] == [429, 200]


@pytest.fixture
def two_slots(settings: Settings) -> Iterator[tuple[FastAPI, Settings]]:
    """The app with a pool of two Argon2 slots (MERCATO_PASSWORD_HASH_CONCURRENCY=2)."""
    narrow = settings.model_copy(update={"password_hash_concurrency": 2})
    runtime = Runtime.from_settings(narrow)
    yield create_app(runtime), narrow
    runtime.db.dispose()


def _until(settings: Settings, ready: Callable[[service.HashPool], bool]) -> None:
    assert service.hash_pool(settings).wait_for(ready, WAIT)


def test_verifications_run_in_a_bounded_pool(
    two_slots: tuple[FastAPI, Settings], db: Database, verifications: Verifications
) -> None:
    app, settings = two_slots
    assert service.hash_pool(settings).size == 2
    make_account(db, OWNER)
    verifications.gate = threading.Event()
    logins = [(f"203.0.113.{n + 1}", OWNER, WRONG) for n in range(6)]
    with ThreadPoolExecutor(1) as background:
        answers = background.submit(_at_once, app, logins)
        # Two verifications hold the two slots; the four others wait for one.
        _until(settings, lambda pool: pool.running == 2 and pool.waiting == 4)
        assert verifications.inside == 2
        verifications.gate.set()
        responses = answers.result(WAIT)
    assert _statuses(responses) == {401: 6}
    assert verifications.count == 6 and verifications.most_inside == 2
    _until(settings, lambda pool: pool.running == 0 and pool.waiting == 0)
