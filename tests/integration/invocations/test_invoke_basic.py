"""The invoke happy path, the receipt and the balance."""

from __future__ import annotations

import pytest

from builders.invocation_world import PRICE, SERVICE, World
from mercato.db.aio import observing


def test_success_settles_and_receipt_tells_it(world: World) -> None:
    response = world.invoke({"n": 7})
    assert response.status_code == 200, response.text
    body = response.json()
    invocation_id = body["invocationId"]
    assert body == {"invocationId": invocation_id, "result": {"echo": {"n": 7}}}
    assert response.headers["RateLimit-Policy"] == '"standard";q=60;w=60'
    assert response.headers["RateLimit"].startswith('"standard";r=59;t=')
    assert world.balances() == (100 - PRICE, 0)
    assert world.earnings() == 7
    key = world.provider_key(invocation_id)
    assert world.provider.executions[key] == 1
    # No caller header reaches the provider: only its own credential and the platform key.
    sent = world.provider.seen_headers[-1]
    assert sent["Idempotency-Key"] == key and "key-1" not in sent.values()

    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert receipt["settlement"] == "SETTLED" and receipt["actualSpend"] == PRICE
    assert set(receipt) == {
        "invocationId",
        "serviceCode",
        "version",
        "contractDigest",
        "status",
        "settlement",
        "listedPrice",
        "actualSpend",
        "createdAt",
        "settledAt",
        "refundedAt",
        "errorCode",
        "artifacts",
        "idempotencyKey",
        "channel",
        "resolution",
    }
    assert receipt["resolution"] is None
    assert (receipt["serviceCode"], receipt["version"], receipt["status"]) == (
        SERVICE,
        "v1",
        "SUCCEEDED",
    )
    assert (receipt["idempotencyKey"], receipt["channel"]) == ("key-1", "API_KEY")
    assert world.get("/v1/balance").json() == {"available": 90, "reserved": 0}


def test_replay_returns_same_body_and_spends_nothing(world: World) -> None:
    first = world.invoke({"n": 1})
    again = world.invoke({"n": 1})
    assert again.status_code == 200
    assert again.content == first.content
    assert world.balances() == (90, 0)
    assert sum(world.provider.executions.values()) == 1
    # A replay does not consume quota either.
    assert world.get("/v1/rate-limit").json()["accepted"] == 1


@pytest.mark.postgres_only
@pytest.mark.parametrize("memory", [True, False], ids=["hints", "no-hints"])
def test_on_postgresql_an_invoke_is_two_statements_and_no_commit(
    world: World, memory: bool
) -> None:
    # Accept and settle are one data-modifying CTE each (decision 0240, no database function),
    # run in one-statement sessions, so neither needs BEGIN or COMMIT (decision 0191). The
    # caller's key and the version's facts are in the process's memory after one call, and a
    # used Idempotency-Key stops accept itself (decision 0400): nothing is read before accept.
    if not memory:
        world.runtime.hints = None
    assert world.invoke({"n": 0}, key="warm").status_code == 200  # records the key's last use
    seen: list[tuple[str, str]] = []
    with observing(world.runtime.adb, lambda kind, detail: seen.append((kind, detail))):
        response = world.invoke({"n": 7}, key="counted")
    assert response.status_code == 200, response.text
    sent = [detail for kind, detail in seen if kind == "sql"]
    units = [detail for kind, detail in seen if kind == "unit"]
    writes = [s for s in sent if not s.lstrip().startswith("SELECT")]
    assert len(writes) == 2, sent
    # Each first takes the money lock, shared (decision 0370), then its steps in order.
    assert all(w.startswith("WITH mercato_money AS") for w in writes)
    assert "\nintent AS \n(INSERT" in writes[0] and "\nfinish AS \n(UPDATE" in writes[1]
    assert "INSERT INTO reservations" in writes[0] and "UPDATE reservations" in writes[1]
    assert all("invocation_accept(" not in w and "invocation_settle(" not in w for w in writes)
    assert not {"BEGIN", "COMMIT"} & {s.strip().upper() for s in sent}
    # Without memory, five statements in all: the API key; the Idempotency-Key; the version
    # with its holds, its dispatch target and the caller's policy (one read); accept; settle.
    assert len(sent) == (2 if memory else 5), sent
    # Three units of work on the async database: one read for the caller and the call's facts,
    # then accept, then settle (each one statement, atomic on its own).
    assert units == ["read", "statement", "statement"]
    assert world.balances() == (100 - 2 * PRICE, 0)
    assert world.earnings() == 14
    assert world.ledger_balanced()
