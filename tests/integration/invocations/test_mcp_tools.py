"""`/mcp` through the ASGI app (DESIGN §12): what `tools/list` and `tools/call` answer, on both
stores. The SDK's own client over real HTTP is in tests/functional/mcp; here the JSON-RPC
messages are written out so that each answer can be read member by member."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from builders.accounts import login, make_account, make_api_key
from builders.catalog import hold, publish
from builders.invocation_world import CONTRACT, PRICE, SERVICE, World, running_world
from builders.invocations import ScriptedProvider, ok, unknown
from mercato.accounts import service as accounts
from mercato.invocations import spend
from mercato.ledger import service as ledger
from mercato.providers.models import ProviderConnection
from mercato.web.app import create_app
from mercato.web.mcp.tools import PAGE_SIZE, tool_name

TOOL = "acme_echo__v1"
KEY = "mercato/idempotencyKey"


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    # TestClient sends `Host: testserver`; a deployment lists its own host names.
    with running_world(db_url, tmp_path, provider, mcp_allowed_hosts="testserver") as built:
        yield built


@pytest.fixture
def mcp(world: World) -> Iterator[TestClient]:
    """The world's app with its lifespan running (the MCP endpoint serves only then)."""
    with TestClient(create_app(world.runtime), raise_server_exceptions=False) as client:
        yield client


def rpc(
    client: TestClient,
    api_key: str,
    method: str,
    params: dict[str, Any],
    *,
    query: str = "",
) -> dict[str, Any]:
    response = client.post(
        f"/mcp{query}",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def call(
    client: TestClient, api_key: str, name: str, arguments: Any, key: str | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if key is not None:
        params["_meta"] = {KEY: key}
    result: dict[str, Any] = rpc(client, api_key, "tools/call", params)["result"]
    return result


def names(client: TestClient, api_key: str, *, query: str = "", cursor: str | None = None) -> Any:
    params = {} if cursor is None else {"cursor": cursor}
    result = rpc(client, api_key, "tools/list", params, query=query)["result"]
    return [tool["name"] for tool in result["tools"]], result.get("nextCursor")


def connection_of(world: World) -> str:
    with world.runtime.db.read() as session:
        connection_id: str = session.scalars(select(ProviderConnection.id)).one()
    return connection_id


def test_a_version_tool_describes_the_version(world: World, mcp: TestClient) -> None:
    result = rpc(mcp, world.api_key, "tools/list", {})["result"]
    tool = next(t for t in result["tools"] if t["name"] == TOOL)
    assert tool["inputSchema"] == CONTRACT["requestSchema"]
    assert tool["outputSchema"] == CONTRACT["resultSchema"]
    assert tool["_meta"]["mercato/price"] == PRICE
    assert tool["_meta"]["mercato/serviceCode"] == SERVICE
    assert tool["_meta"]["mercato/version"] == "v1"
    assert len(tool["_meta"]["mercato/contractDigest"]) == 64
    assert "10 points per successful call; a failed call costs nothing." in tool["description"]
    assert "a retry is a new call" in tool["description"]
    assert tool["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }


def test_pending_is_an_error_that_points_to_the_receipt(world: World, mcp: TestClient) -> None:
    world.provider.script(unknown())
    pending = call(mcp, world.api_key, TOOL, {"n": 3}, key="agent-1")
    assert pending["isError"] is True
    document = pending["structuredContent"]
    invocation_id = pending["_meta"]["mercato/invocationId"]
    assert document["code"] == "OUTCOME_PENDING"
    assert document["invocationId"] == invocation_id
    assert "mercato_receipt" in document["message"] and "Do not call again" in document["message"]
    assert pending["_meta"]["mercato/settlement"] == "PENDING"
    assert world.balances() == (100 - PRICE, PRICE)  # reserved, not spent

    receipt = call(mcp, world.api_key, "mercato_receipt", {"invocationId": invocation_id})
    assert receipt["structuredContent"]["status"] == "PENDING"

    world.work()  # the worker learns the outcome from the provider
    settled = call(mcp, world.api_key, TOOL, {"n": 3}, key="agent-1")
    assert settled["isError"] is False
    assert settled["structuredContent"] == {"echo": {"n": 3}}
    assert settled["_meta"]["mercato/invocationId"] == invocation_id
    assert settled["_meta"]["mercato/settlement"] == "SETTLED"
    assert world.provider.executions[world.provider_key(invocation_id)] == 1
    assert world.balances() == (100 - PRICE, 0)


def test_refusals_are_problem_documents_and_change_nothing(world: World, mcp: TestClient) -> None:
    bad_key = call(mcp, world.api_key, TOOL, {"n": 1}, key="é")
    assert bad_key["isError"] and bad_key["structuredContent"]["code"] == "IDEMPOTENCY_KEY_INVALID"
    schema = call(mcp, world.api_key, TOOL, {"n": "one"}, key="agent-2")
    assert schema["structuredContent"]["code"] == "REQUEST_SCHEMA_VIOLATION"
    assert [e["pointer"] for e in schema["structuredContent"]["errors"]] == ["/n"]
    unknown_tool = call(mcp, world.api_key, "acme_nothing__v9", {"n": 1}, key="agent-3")
    assert unknown_tool["structuredContent"]["code"] == "VERSION_NOT_FOUND"
    nonsense = call(mcp, world.api_key, "no such tool", {"n": 1})
    assert nonsense["structuredContent"]["code"] == "VERSION_NOT_FOUND"
    assert nonsense["_meta"]["mercato/invocationId"] is None
    assert world.invocations() == []
    assert world.balances() == (100, 0)


def test_a_call_over_the_keys_spend_limit_is_an_error_result(world: World, mcp: TestClient) -> None:
    agent, key_id = make_api_key(world.runtime.db, world.caller_id, name="agent")
    with world.runtime.db.transaction() as session:
        spend.set_limit(
            session,
            key_id=key_id,
            account_id=None,
            limit=(PRICE, spend.Period.DAY),
            now=world.clock.now(),
        )
    assert call(mcp, agent, TOOL, {"n": 1}, key="within")["isError"] is False

    over = call(mcp, agent, TOOL, {"n": 2}, key="over")

    assert over["isError"] is True
    document = over["structuredContent"]
    assert document["code"] == "KEY_SPEND_LIMIT_REACHED" and document["status"] == 402
    assert (document["limit"], document["used"]) == (PRICE, PRICE)
    assert document["resetsAt"].endswith("T00:00:00Z")
    assert (
        over["content"][0]["type"] == "text" and document["message"] in over["content"][0]["text"]
    )
    assert over["_meta"]["mercato/invocationId"] is None
    assert len(world.invocations()) == 1 and world.balances() == (100 - PRICE, 0)
    # The same tool through another key of the account is not limited.
    assert call(mcp, world.api_key, TOOL, {"n": 2}, key="over")["isError"] is False


def test_without_a_key_a_retry_is_a_new_call(world: World, mcp: TestClient) -> None:
    world.provider.script(ok(), ok())
    first = call(mcp, world.api_key, TOOL, {"n": 1})
    second = call(mcp, world.api_key, TOOL, {"n": 1})
    assert first["_meta"]["mercato/invocationId"] != second["_meta"]["mercato/invocationId"]
    assert first["_meta"]["mercato/idempotencyKey"] != second["_meta"]["mercato/idempotencyKey"]
    assert world.balances() == (100 - 2 * PRICE, 0)


def test_receipts_and_balance_are_the_callers_own(world: World, mcp: TestClient) -> None:
    world.provider.script(ok())
    mine = call(mcp, world.api_key, TOOL, {"n": 1}, key="agent-4")
    invocation_id = mine["_meta"]["mercato/invocationId"]
    other_id = make_account(world.runtime.db, "other@example.com", password=None)
    other_key, _ = make_api_key(world.runtime.db, other_id)
    theirs = call(mcp, other_key, "mercato_receipt", {"invocationId": invocation_id})
    assert theirs["isError"] and theirs["structuredContent"]["code"] == "INVOCATION_NOT_FOUND"
    receipt = call(mcp, world.api_key, "mercato_receipt", {"invocationId": invocation_id})
    assert receipt["structuredContent"] == world.get(f"/v1/invocations/{invocation_id}").json()
    balance = call(mcp, world.api_key, "mercato_balance", {})
    assert balance["structuredContent"] == {"available": 100 - PRICE, "reserved": 0}
    assert call(mcp, other_key, "mercato_balance", {})["structuredContent"] == {
        "available": 0,
        "reserved": 0,
    }


def test_the_list_pages_narrows_and_follows_holds(world: World, mcp: TestClient) -> None:
    connection_id = connection_of(world)
    for number in range(2, PAGE_SIZE + 2):  # v1 .. v101 of acme.echo
        publish(world.runtime, connection_id, service_code=SERVICE, version=f"v{number}")
    long_code = "acme." + "very-long-service-name-" * 3 + "x"
    publish(world.runtime, connection_id, service_code=long_code, contract=CONTRACT)
    long_name = tool_name(long_code, "v1")
    assert len(long_name) == 64 and long_name.startswith(long_code.replace(".", "_")[:55])

    first, cursor = names(mcp, world.api_key)
    assert first[:2] == ["mercato_balance", "mercato_receipt"]
    assert len(first) == 2 + PAGE_SIZE and cursor is not None
    rest, end = names(mcp, world.api_key, cursor=cursor)
    assert end is None
    assert sorted([*first[2:], *rest]) == sorted(
        [*(f"acme_echo__v{n}" for n in range(1, PAGE_SIZE + 2)), long_name]
    )

    narrowed, _ = names(mcp, world.api_key, query=f"?tools=acme_echo__v7,{long_name},nope__v1")
    assert narrowed == ["acme_echo__v7", long_name]
    called = call(mcp, world.api_key, long_name, {"n": 5}, key="agent-5")
    assert called["structuredContent"] == {"echo": {"n": 5}}
    assert called["_meta"]["mercato/settlement"] == "SETTLED"

    bad_cursor = rpc(mcp, world.api_key, "tools/list", {"cursor": "not-a-cursor"})
    assert bad_cursor["error"]["code"] == -32602

    hold(world.runtime, SERVICE)
    after, _ = names(mcp, world.api_key)
    assert after == ["mercato_balance", "mercato_receipt", long_name]


def test_credentials_are_those_of_invoke(world: World, mcp: TestClient) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": "Basic abc"}):
        refused = mcp.post("/mcp", json=message, headers={**accept, **headers})
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert refused.json()["code"] == "UNAUTHENTICATED"
    revoked_key, key_id = make_api_key(world.runtime.db, world.caller_id)
    with world.runtime.db.transaction() as session:
        accounts.revoke_api_key(
            session, account_id=world.caller_id, key_id=key_id, now=world.clock.now()
        )
    revoked = mcp.post(
        "/mcp", json=message, headers={**accept, "Authorization": f"Bearer {revoked_key}"}
    )
    assert revoked.status_code == 401


def test_only_configured_hosts_are_answered(world: World, mcp: TestClient) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Authorization": f"Bearer {world.api_key}",
        "Accept": "application/json, text/event-stream",
    }
    foreign = mcp.post("/mcp", json=message, headers={**headers, "Host": "evil.example"})
    assert foreign.status_code == 421
    origin = mcp.post("/mcp", json=message, headers={**headers, "Origin": "http://evil.example"})
    assert origin.status_code == 403
    with TestClient(create_app(world.runtime), base_url="http://localhost:8000") as other:
        elsewhere = other.post("/mcp", json=message, headers=headers)
    assert elsewhere.status_code == 421  # loopback is not answered unless configured


def test_a_session_access_token_calls_as_the_session(world: World, mcp: TestClient) -> None:
    account_id = make_account(world.runtime.db, "agent@example.com")
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=account_id, amount=50, now=world.clock.now())
    token = login(mcp, "agent@example.com")["accessToken"]
    called = call(mcp, token, TOOL, {"n": 9}, key="session-1")
    assert called["isError"] is False and called["structuredContent"] == {"echo": {"n": 9}}
    invocation_id = called["_meta"]["mercato/invocationId"]
    receipt = call(mcp, token, "mercato_receipt", {"invocationId": invocation_id})
    assert receipt["structuredContent"]["channel"] == "SESSION"
    assert call(mcp, token, "mercato_balance", {})["structuredContent"] == {
        "available": 50 - PRICE,
        "reserved": 0,
    }


def test_arguments_are_judged_as_an_invoke_body_would_be(world: World, mcp: TestClient) -> None:
    """Abuse: arguments the JSON encoder of the hot path refuses (an integer past 64 bits) or
    that nest past the platform's depth are a problem document, never a protocol error."""
    huge = call(mcp, world.api_key, TOOL, {"n": 10**30, "tags": "x"}, key="abuse-1")
    assert huge["isError"] and huge["structuredContent"]["code"] == "REQUEST_SCHEMA_VIOLATION"
    assert [e["pointer"] for e in huge["structuredContent"]["errors"]] == ["/tags"]
    deep: Any = "leaf"
    for _ in range(80):
        deep = {"d": deep}
    nested = call(mcp, world.api_key, TOOL, {"n": 1, "deep": deep}, key="abuse-2")
    assert nested["isError"]
    assert nested["structuredContent"]["code"] in ("REQUEST_SCHEMA_VIOLATION", "REQUEST_TOO_LARGE")
    assert world.invocations() == [] and world.balances() == (100, 0)


def test_a_call_still_in_flight_under_the_key_says_when_to_look_again(
    world: World, mcp: TestClient
) -> None:
    invocation_id = world.accept_without_sending("agent-6", lease_seconds=30)
    busy = call(mcp, world.api_key, TOOL, {"n": 1}, key="agent-6")
    document = busy["structuredContent"]
    assert busy["isError"] and document["code"] == "IDEMPOTENCY_KEY_IN_USE"
    assert isinstance(document["retryAfter"], int) and 1 <= document["retryAfter"] <= 30
    assert busy["_meta"]["mercato/invocationId"] == invocation_id
    assert busy["_meta"]["mercato/settlement"] == "PENDING"
    assert world.provider.executions[world.provider_key(invocation_id)] == 0
