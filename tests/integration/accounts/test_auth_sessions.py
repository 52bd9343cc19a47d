"""Sessions for programs: login, rotating refresh, reuse detection, logout, throttling."""

from __future__ import annotations

from fastapi.testclient import TestClient

from builders.accounts import DEFAULT_PASSWORD, bearer, login, make_account
from mercato.core.clock import FakeClock
from mercato.db.uow import Database
from mercato.settings import Settings


def _refresh(client: TestClient, token: str) -> tuple[int, dict[str, object]]:
    response = client.post("/v1/auth/refresh", json={"refreshToken": token})
    return response.status_code, response.json()


def _me(client: TestClient, access: str) -> int:
    return client.get("/v1/me", headers=bearer(access)).status_code


def test_login_returns_a_bearer_pair_that_marks_the_session_channel(
    client: TestClient, db: Database, settings: Settings
) -> None:
    account_id = make_account(db, "Alice@Example.com", is_staff=True)
    pair = login(client, "alice@EXAMPLE.com")
    assert pair["tokenType"] == "Bearer"
    assert pair["expiresIn"] == settings.access_token_ttl_seconds
    assert pair["accessToken"].startswith("mercato_at_")
    assert pair["refreshToken"].startswith("mercato_rt_")
    me = client.get("/v1/me", headers=bearer(pair["accessToken"])).json()
    assert me == {
        "accountId": account_id,
        "email": "alice@example.com",
        "isStaff": True,
        "channel": "SESSION",
    }


def test_replaying_a_spent_refresh_token_ends_the_whole_family(
    client: TestClient, db: Database
) -> None:
    make_account(db)
    first = login(client)
    status, second = _refresh(client, first["refreshToken"])
    assert status == 200
    assert second["refreshToken"] != first["refreshToken"]
    assert _me(client, str(second["accessToken"])) == 200
    status, third = _refresh(client, str(second["refreshToken"]))
    assert status == 200

    status, problem = _refresh(client, first["refreshToken"])  # replay: theft suspected
    assert status == 401 and problem["code"] == "INVALID_REFRESH_TOKEN"

    for access in (first["accessToken"], second["accessToken"], third["accessToken"]):
        assert _me(client, str(access)) == 401
    for refresh in (first["refreshToken"], second["refreshToken"], third["refreshToken"]):
        assert _refresh(client, str(refresh))[0] == 401


def test_another_login_is_a_separate_family(client: TestClient, db: Database) -> None:
    make_account(db)
    victim = login(client)
    other = login(client)
    _refresh(client, victim["refreshToken"])
    _refresh(client, victim["refreshToken"])  # reuse revokes only the victim's family
    assert _me(client, victim["accessToken"]) == 401
    assert _me(client, other["accessToken"]) == 200
    assert _refresh(client, other["refreshToken"])[0] == 200


def test_logout_with_the_access_token_revokes_the_family(client: TestClient, db: Database) -> None:
    make_account(db)
    pair = login(client)
    response = client.post("/v1/auth/logout", headers=bearer(pair["accessToken"]))
    assert response.status_code == 204
    assert _me(client, pair["accessToken"]) == 401
    assert _refresh(client, pair["refreshToken"])[0] == 401


def test_logout_with_the_refresh_token_revokes_the_family(client: TestClient, db: Database) -> None:
    make_account(db)
    pair = login(client)
    response = client.post("/v1/auth/logout", json={"refreshToken": pair["refreshToken"]})
    assert response.status_code == 204
    assert _me(client, pair["accessToken"]) == 401
    assert _refresh(client, pair["refreshToken"])[0] == 401


def test_logout_needs_some_credential(client: TestClient) -> None:
    assert client.post("/v1/auth/logout").status_code == 401
    unknown = client.post("/v1/auth/logout", json={"refreshToken": "mercato_rt_" + "x" * 43})
    assert unknown.status_code == 401


def test_access_token_expires(client: TestClient, db: Database, clock: FakeClock) -> None:
    make_account(db)
    pair = login(client)
    clock.advance(pair["expiresIn"] - 1)
    assert _me(client, pair["accessToken"]) == 200
    clock.advance(1)
    assert _me(client, pair["accessToken"]) == 401
    assert _refresh(client, pair["refreshToken"])[0] == 200


def test_wrong_password_and_unknown_email_look_the_same(client: TestClient, db: Database) -> None:
    make_account(db)
    wrong = client.post(
        "/v1/auth/login", json={"email": "caller@example.com", "password": "not the one"}
    )
    unknown = client.post(
        "/v1/auth/login", json={"email": "nobody@example.com", "password": DEFAULT_PASSWORD}
    )
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert wrong.json()["code"] == "INVALID_CREDENTIALS"


def test_unknown_body_members_are_refused(client: TestClient, db: Database) -> None:
    make_account(db)
    body = {"email": "caller@example.com", "password": DEFAULT_PASSWORD, "remember": True}
    assert client.post("/v1/auth/login", json=body).status_code == 400
    pair = login(client)
    refresh = {"refreshToken": pair["refreshToken"], "scope": "admin"}
    assert client.post("/v1/auth/refresh", json=refresh).status_code == 400
    assert client.post("/v1/auth/login", content=b"not json").status_code == 400
    secret = "p" * 2000  # too long: refused without echoing it back
    long = client.post("/v1/auth/login", json={"email": "caller@example.com", "password": secret})
    assert long.status_code == 400 and secret not in long.text


def test_failed_logins_from_one_address_throttle_that_address_for_the_email(
    client: TestClient, db: Database, settings: Settings, clock: FakeClock
) -> None:
    make_account(db)
    bad = {"email": "caller@example.com", "password": "guess guess"}
    for _ in range(settings.login_attempts_per_window):
        assert client.post("/v1/auth/login", json=bad).status_code == 401
    limited = client.post(
        "/v1/auth/login", json={"email": "caller@example.com", "password": DEFAULT_PASSWORD}
    )
    assert limited.status_code == 429
    assert limited.json()["code"] == "LOGIN_THROTTLED"
    retry_after = int(limited.headers["retry-after"])
    assert 1 <= retry_after <= settings.login_window_seconds

    clock.advance(retry_after)
    login(client)  # the window moved on: the right password works again
