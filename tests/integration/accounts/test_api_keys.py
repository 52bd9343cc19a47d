"""API keys through the app: shown once, digest-only storage, revocation, session only."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from builders.accounts import DEFAULT_PASSWORD, bearer, login, make_account, make_api_key
from mercato.db.uow import Database


def _dump(db: Database) -> str:
    """Every row of every table in the database, as text."""
    lines: list[str] = []
    with db.engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                lines.append(f"{table}: {tuple(row)!r}")
    return "\n".join(lines)


def test_create_list_and_use_a_key(client: TestClient, db: Database) -> None:
    make_account(db)
    session = login(client)
    created = client.post(
        "/v1/api-keys", json={"name": "ci"}, headers=bearer(session["accessToken"])
    )
    assert created.status_code == 201
    body = created.json()
    assert body["apiKey"].startswith("mercato_live_") and len(body["apiKey"]) == 56
    assert body["name"] == "ci" and body["keyId"] and body["createdAt"]

    balance = client.get("/v1/balance", headers=bearer(body["apiKey"]))
    assert balance.status_code == 200

    listed = client.get("/v1/api-keys", headers=bearer(session["accessToken"])).json()
    [item] = listed["items"]
    assert item["keyId"] == body["keyId"]
    assert item["lastUsedAt"] is not None and item["revokedAt"] is None
    assert body["apiKey"] not in str(listed)


def test_plaintext_key_and_password_are_absent_from_a_database_dump(
    client: TestClient, db: Database
) -> None:
    make_account(db)
    session = login(client)
    via_api = client.post(
        "/v1/api-keys", json={"name": "web"}, headers=bearer(session["accessToken"])
    ).json()["apiKey"]
    account_id = make_account(db, "second@example.com")
    via_service, _ = make_api_key(db, account_id)
    assert client.get("/v1/balance", headers=bearer(via_api)).status_code == 200

    dump = _dump(db)
    assert "api_keys:" in dump and "refresh_tokens:" in dump  # the dump did see the rows
    for secret in (via_api, via_service, DEFAULT_PASSWORD, session["refreshToken"]):
        assert secret not in dump
        assert secret.removeprefix("mercato_live_").removeprefix("mercato_rt_") not in dump


def test_revoked_key_is_refused_at_once(client: TestClient, db: Database) -> None:
    make_account(db)
    session = login(client)
    headers = bearer(session["accessToken"])
    created = client.post("/v1/api-keys", json={"name": "ci"}, headers=headers).json()
    assert client.get("/v1/balance", headers=bearer(created["apiKey"])).status_code == 200

    revoked = client.post(f"/v1/api-keys/{created['keyId']}:revoke", headers=headers)
    assert revoked.status_code == 200 and revoked.json()["revokedAt"]
    again = client.post(f"/v1/api-keys/{created['keyId']}:revoke", headers=headers)
    assert again.status_code == 200
    assert again.json()["revokedAt"] == revoked.json()["revokedAt"]

    refused = client.get("/v1/balance", headers=bearer(created["apiKey"]))
    assert refused.status_code == 401
    assert refused.json()["code"] == "UNAUTHENTICATED"
    assert refused.headers["www-authenticate"].startswith("Bearer")


def test_another_accounts_key_cannot_be_revoked(client: TestClient, db: Database) -> None:
    owner = make_account(db, "owner@example.com")
    plaintext, key_id = make_api_key(db, owner)
    make_account(db)
    session = login(client)
    response = client.post(f"/v1/api-keys/{key_id}:revoke", headers=bearer(session["accessToken"]))
    assert response.status_code == 404
    assert response.json()["code"] == "API_KEY_NOT_FOUND"
    assert client.get("/v1/balance", headers=bearer(plaintext)).status_code == 200


def test_an_api_key_cannot_manage_keys_or_read_me(client: TestClient, db: Database) -> None:
    account_id = make_account(db)
    plaintext, key_id = make_api_key(db, account_id)
    headers = bearer(plaintext)
    attempts = [
        client.post("/v1/api-keys", json={"name": "more"}, headers=headers),
        client.get("/v1/api-keys", headers=headers),
        client.post(f"/v1/api-keys/{key_id}:revoke", headers=headers),
        client.get("/v1/me", headers=headers),
    ]
    for response in attempts:
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["code"] == "SESSION_REQUIRED"
    assert client.get("/v1/balance", headers=headers).status_code == 200
    me = client.get("/v1/me", headers=bearer(login(client)["accessToken"]))
    assert me.status_code == 200
    assert me.json() == {
        "accountId": account_id,
        "email": "caller@example.com",
        "isStaff": False,
        "channel": "SESSION",
    }


def test_key_management_needs_authentication_and_a_clean_body(
    client: TestClient, db: Database
) -> None:
    assert client.get("/v1/api-keys").status_code == 401
    make_account(db)
    headers = bearer(login(client)["accessToken"])
    extra = client.post("/v1/api-keys", json={"name": "ci", "scope": "all"}, headers=headers)
    assert extra.status_code == 400
    assert client.post("/v1/api-keys", json={"name": ""}, headers=headers).status_code == 400
