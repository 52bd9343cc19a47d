"""A key's spend limit through the session API (DESIGN §8): set at creation, listed with its use
and reset time, changed and removed; session only; malformed limits refused, nothing written."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient

from builders.accounts import bearer, login, make_account
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime
from mercato.db.uow import Database


def _session(client: TestClient, db: Database) -> dict[str, str]:
    make_account(db)
    return bearer(login(client)["accessToken"])


def _item(client: TestClient, auth: dict[str, str], key_id: str) -> dict[str, object]:
    items = client.get("/v1/api-keys", headers=auth).json()["items"]
    [found] = [item for item in items if item["keyId"] == key_id]
    return dict(found)


def test_a_key_created_with_a_limit_lists_its_use_and_reset(
    client: TestClient, db: Database, runtime: Runtime
) -> None:
    runtime.clock = FakeClock(dt.datetime(2026, 12, 9, 15, 30, tzinfo=dt.UTC))  # a Wednesday
    auth = _session(client, db)
    limit = {"points": 500, "period": "WEEK"}
    created = client.post("/v1/api-keys", json={"name": "agent", "spendLimit": limit}, headers=auth)
    assert created.status_code == 201 and created.json()["spendLimit"] == limit
    key_id = created.json()["keyId"]

    item = _item(client, auth, key_id)
    assert item["spendLimit"] == limit and item["spentInPeriod"] == 0
    assert item["periodResetsAt"] == "2026-12-14T00:00:00Z"  # the next Monday

    plain = client.post("/v1/api-keys", json={"name": "plain"}, headers=auth).json()
    assert plain["spendLimit"] is None
    item = _item(client, auth, plain["keyId"])
    assert (item["spendLimit"], item["spentInPeriod"], item["periodResetsAt"]) == (None, None, None)


def test_put_and_delete_change_the_limit(
    client: TestClient, db: Database, runtime: Runtime
) -> None:
    runtime.clock = FakeClock(dt.datetime(2026, 2, 3, 4, 5, tzinfo=dt.UTC))
    auth = _session(client, db)
    key_id = client.post("/v1/api-keys", json={"name": "k"}, headers=auth).json()["keyId"]
    path = f"/v1/api-keys/{key_id}/spend-limit"

    put = client.put(path, json={"points": 0, "period": "MONTH"}, headers=auth)
    assert put.status_code == 200
    assert put.json() == {
        "keyId": key_id,
        "spendLimit": {"points": 0, "period": "MONTH"},
        "spentInPeriod": 0,
        "periodResetsAt": "2026-03-01T00:00:00Z",
    }
    total = client.put(path, json={"points": 7, "period": "TOTAL"}, headers=auth).json()
    assert total["spendLimit"] == {"points": 7, "period": "TOTAL"}
    assert total["periodResetsAt"] is None
    assert _item(client, auth, key_id)["spendLimit"] == {"points": 7, "period": "TOTAL"}

    removed = client.delete(path, headers=auth)
    assert removed.status_code == 200 and removed.json()["spendLimit"] is None
    assert _item(client, auth, key_id)["spendLimit"] is None


def test_malformed_limits_are_refused_and_change_nothing(client: TestClient, db: Database) -> None:
    auth = _session(client, db)
    key_id = client.post("/v1/api-keys", json={"name": "k"}, headers=auth).json()["keyId"]
    path = f"/v1/api-keys/{key_id}/spend-limit"
    for body in (
        {"points": -1, "period": "DAY"},
        {"points": 5, "period": "HOUR"},
        {"points": 5},
        {"points": "5", "period": "DAY", "extra": 1},
        {"points": 2**53, "period": "DAY"},
        {"points": 1.5, "period": "DAY"},
    ):
        refused = client.put(path, json=body, headers=auth)
        assert refused.status_code == 400, body
        assert refused.json()["code"] == "INVALID_REQUEST"
        created = client.post(
            "/v1/api-keys", json={"name": "bad", "spendLimit": body}, headers=auth
        )
        assert created.status_code == 400, body
    items = client.get("/v1/api-keys", headers=auth).json()["items"]
    assert [item["spendLimit"] for item in items] == [None]


def test_only_a_session_of_the_owner_changes_a_limit(client: TestClient, db: Database) -> None:
    auth = _session(client, db)
    created = client.post("/v1/api-keys", json={"name": "k"}, headers=auth).json()
    path = f"/v1/api-keys/{created['keyId']}/spend-limit"
    limit = {"points": 10, "period": "DAY"}

    with_key = client.put(path, json=limit, headers=bearer(created["apiKey"]))
    assert with_key.status_code == 403 and with_key.json()["code"] == "SESSION_REQUIRED"
    assert client.delete(path, headers=bearer(created["apiKey"])).status_code == 403

    make_account(db, "other@example.com")
    other = bearer(login(client, "other@example.com")["accessToken"])
    assert client.put(path, json=limit, headers=other).status_code == 404
    assert client.delete(path, headers=other).status_code == 404
    missing = client.put("/v1/api-keys/key_nope/spend-limit", json=limit, headers=auth)
    assert missing.status_code == 404 and missing.json()["code"] == "API_KEY_NOT_FOUND"
    assert _item(client, auth, created["keyId"])["spendLimit"] is None
