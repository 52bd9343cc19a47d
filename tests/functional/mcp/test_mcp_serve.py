"""`/mcp` on `mercato serve --workers 2`, driven by the official `mcp` client over real HTTP in
front of a real SDK provider process (DESIGN §12): a tool call is an invoke, charged at most
once per `_meta` key, and the tool list follows the catalog across processes."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from builders.catalog import hold
from builders.client_platform import POINTS, PRICE, SERVICE, Platform, build_platform
from builders.platform_process import LiveProcess, free_port, mercato

pytestmark = pytest.mark.functional

TOOL = "acme_echo__v1"
KEY = "mercato/idempotencyKey"
T = TypeVar("T")


class ServeTwoWorkers(LiveProcess):
    """`mercato serve --workers 2`: the kernel spreads connections over two processes."""

    what = "serve --workers 2"

    def __init__(self, env: dict[str, str], log: Path) -> None:
        port = free_port()
        args = [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", "2"]
        super().__init__(args, log, port=port, env=env)


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[tuple[Platform, ServeTwoWorkers]]:
    world = build_platform(db_url, tmp_path)
    serve = ServeTwoWorkers(world.env, world.logs / "serve.log")
    try:
        yield world, serve
    finally:
        serve.stop()
        world.provider.stop()
        world.runtime.db.dispose()


def with_client(url: str, api_key: str, work: Callable[[Client], Awaitable[T]]) -> T:
    """Run `work` with the SDK's client connected to `url`/mcp with the caller's key; no
    client-side cache, so every list is the server's answer."""

    async def main() -> T:
        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport, cache=None) as client:
                return await work(client)

    return anyio.run(main)


def receipt_over_http(url: str, api_key: str, invocation_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/v1/invocations/{invocation_id}", headers={"Authorization": f"Bearer {api_key}"}
    )
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


def test_a_tool_call_is_an_invoke_charged_once_per_key(
    platform: tuple[Platform, ServeTwoWorkers],
) -> None:
    world, serve = platform

    async def work(client: Client) -> dict[str, Any]:
        listed = await client.list_tools()
        first = await client.call_tool(TOOL, {"n": 1}, meta={KEY: "agent-call-1"})
        again = await client.call_tool(TOOL, {"n": 1}, meta={KEY: "agent-call-1"})
        other = await client.call_tool(TOOL, {"n": 2}, meta={KEY: "agent-call-1"})
        empty = await client.call_tool(TOOL, {}, meta={KEY: "agent-call-2"})
        receipt = await client.call_tool(
            "mercato_receipt", {"invocationId": first.meta["mercato/invocationId"]}
        )
        balance = await client.call_tool("mercato_balance", {})
        return {
            "tools": {tool.name: tool for tool in listed.tools},
            "first": first,
            "again": again,
            "other": other,
            "empty": empty,
            "receipt": receipt,
            "balance": balance,
        }

    seen = with_client(serve.url, world.api_key, work)

    tool = seen["tools"][TOOL]
    assert set(seen["tools"]) == {TOOL, "mercato_balance", "mercato_receipt"}
    assert tool.meta["mercato/price"] == PRICE and tool.meta["mercato/serviceCode"] == SERVICE
    assert f"{PRICE} points per successful call" in (tool.description or "")
    assert tool.input_schema["type"] == "object"

    first, again = seen["first"], seen["again"]
    assert not first.is_error
    assert first.structured_content == {"echo": {"n": 1}}
    assert first.meta["mercato/settlement"] == "SETTLED"
    assert first.meta["mercato/idempotencyKey"] == "agent-call-1"
    # The retry with the same key is the same call: one execution, one charge.
    assert again.structured_content == first.structured_content
    assert again.meta["mercato/invocationId"] == first.meta["mercato/invocationId"]
    assert world.provider.runs() == 1
    assert world.balances() == (POINTS - PRICE, 0)

    other = seen["other"]
    assert other.is_error
    assert other.structured_content["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert other.meta.get("mercato/invocationId") is None  # null, or absent (decision 0542)
    empty = seen["empty"]
    assert empty.is_error and empty.structured_content["code"] == "REQUEST_SCHEMA_VIOLATION"
    assert empty.structured_content["errors"][0]["pointer"] == ""
    assert world.provider.runs() == 1

    receipt = seen["receipt"].structured_content
    assert receipt["settlement"] == "SETTLED" and receipt["actualSpend"] == PRICE
    assert seen["balance"].structured_content == {"available": POINTS - PRICE, "reserved": 0}

    # The same call over POST …:invoke: the same receipt, the same charge, one ledger.
    answer = httpx.post(
        f"{serve.url}/v1/services/{SERVICE}/versions/v1:invoke",
        json={"n": 1},
        headers={"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": "http-call-1"},
        timeout=60,
    )
    assert answer.status_code == 200
    assert answer.json()["result"] == first.structured_content
    over_http = receipt_over_http(serve.url, world.api_key, answer.json()["invocationId"])
    over_mcp = receipt_over_http(serve.url, world.api_key, first.meta["mercato/invocationId"])
    assert receipt == over_mcp
    same = ("serviceCode", "version", "contractDigest", "status", "settlement", "listedPrice")
    assert {k: over_http[k] for k in (*same, "actualSpend", "channel")} == {
        k: over_mcp[k] for k in (*same, "actualSpend", "channel")
    }
    assert world.provider.runs() == 2
    assert world.balances() == (POINTS - 2 * PRICE, 0)
    assert world.ledger_balanced()


def test_the_tool_list_follows_the_catalog_and_refusals(
    platform: tuple[Platform, ServeTwoWorkers],
) -> None:
    world, serve = platform

    async def names(client: Client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    assert TOOL in with_client(serve.url, world.api_key, names)
    hold(world.runtime, SERVICE)  # written by another process than either serve worker

    async def after_hold(client: Client) -> tuple[set[set[str]], Any]:
        lists = {frozenset(await names(client)) for _ in range(4)}  # over both workers
        called = await client.call_tool(TOOL, {"n": 1}, meta={KEY: "held-1"})
        return lists, called

    lists, called = with_client(serve.url, world.api_key, after_hold)
    assert lists == {frozenset({"mercato_balance", "mercato_receipt"})}
    assert called.is_error and called.structured_content["code"] == "LISTING_UNAVAILABLE"
    assert called.meta.get("mercato/invocationId") is None
    assert world.provider.runs() == 0 and world.balances() == (POINTS, 0)

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    unauthenticated = httpx.post(f"{serve.url}/mcp", json=initialize, headers=accept)
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["WWW-Authenticate"].startswith("Bearer")
    assert unauthenticated.json()["code"] == "UNAUTHENTICATED"
    bad = httpx.post(
        f"{serve.url}/mcp",
        json=initialize,
        headers={**accept, "Authorization": "Bearer mercato_live_" + "x" * 43},
    )
    assert bad.status_code == 401 and bad.headers["WWW-Authenticate"].startswith("Bearer")
    foreign_host = httpx.post(
        f"{serve.url}/mcp",
        json=initialize,
        headers={**accept, "Authorization": f"Bearer {world.api_key}", "Host": "evil.example"},
    )
    assert foreign_host.status_code == 421
    assert mercato("admin", "verify-ledger", "--json", env=world.env).returncode == 0
