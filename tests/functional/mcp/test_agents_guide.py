"""docs/agents.md, followed as written against `mercato up`: its `sh` blocks start the demo and
make the agent's limited key, its desktop configuration (`json` block) connects the SDK's client
with exactly that URL and header, and its Python block runs as a script with the two variables
the guide exports; then the key's limit, lowered, refuses the next call.

The test only puts the demo's URL and key in place of the guide's examples."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from builders.demo import UpProcess, free_port

# The MCP path runs on both stores in tests/functional/mcp/test_mcp_serve.py and
# tests/integration/invocations/test_mcp_tools.py; the guide is store-agnostic (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]

GUIDE = Path(__file__).parents[3] / "docs" / "agents.md"
EXAMPLE_URL = "http://127.0.0.1:8000"
EXAMPLE_KEY = "mercato_live_…"
TOOL = "pixiv_daily-ranking__v1"


def blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def mercato(env: dict[str, str], line: str) -> subprocess.CompletedProcess[str]:
    """Run one of the guide's `mercato …` lines as written."""
    words = shlex.split(line)
    assert words[0] == "mercato"
    return subprocess.run(
        [sys.executable, "-m", "mercato", *words[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def demo(db_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """`mercato up`, then the guide's limited key for the agent (in `apiKey`)."""
    up_line, create_line = (b.strip() for b in blocks("sh"))
    assert up_line == "mercato up"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(MERCATO_DATA_DIR=str(tmp_path / "var"), MERCATO_DATABASE_URL=db_url)
    up = UpProcess(["--json", "--port", str(free_port())], env, tmp_path / "up.stderr.log")
    try:
        ready = up.ready_json()
        created = mercato(env, create_line)
        assert created.returncode == 0, created.stderr
        assert "spend limit 100 points per day" in created.stdout
        found = re.search(r"^(mercato_live_[0-9A-Za-z]+)$", created.stdout, re.M)
        key_id = re.search(r"(key_[0-9a-z]+)", created.stdout)
        assert found is not None and key_id is not None
        yield ready | {"apiKey": found.group(1), "keyId": key_id.group(1), "env": env}
    finally:
        up.stop()
        up.kill()


def desktop_entry(demo: dict[str, Any]) -> dict[str, Any]:
    (block,) = blocks("json")
    filled = block.replace(EXAMPLE_URL, demo["url"]).replace(EXAMPLE_KEY, demo["apiKey"])
    entry: dict[str, Any] = json.loads(filled)["mcpServers"]["mercato"]
    return entry


def listed_with(url: str, headers: dict[str, str]) -> list[str]:
    async def main() -> list[str]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    return anyio.run(main)


def called_with(url: str, headers: dict[str, str], key: str) -> Any:
    async def main() -> Any:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return await client.call_tool(
                TOOL, {"chart": "manga", "limit": 1}, meta={"mercato/idempotencyKey": key}
            )

    return anyio.run(main)


def test_the_agents_guide_works_as_written(demo: dict[str, Any], tmp_path: Path) -> None:
    entry = desktop_entry(demo)
    assert entry["type"] == "http" and entry["url"] == f"{demo['url']}/mcp"
    assert TOOL in listed_with(entry["url"], entry["headers"])
    narrowed = re.search(r"`(http://127\.0\.0\.1:8000/mcp\?tools=[^`]+)`", GUIDE.read_text())
    assert narrowed is not None
    url = narrowed.group(1).replace(EXAMPLE_URL, demo["url"])
    assert listed_with(url, entry["headers"]) == ["mercato_receipt", TOOL]

    (script,) = blocks("python")
    source = tmp_path / "agent.py"
    source.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(MERCATO_URL=demo["url"], MERCATO_API_KEY=demo["apiKey"])
    ran = subprocess.run(
        [sys.executable, str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines: dict[str, list[str]] = {}
    for line in ran.stdout.splitlines():
        head, _, rest = line.partition(" ")
        lines.setdefault(head, []).append(rest)
    tools = {rest.split(" ", 1)[0]: json.loads(rest.split(" ", 1)[1]) for rest in lines["tool"]}
    assert set(tools) == {TOOL, "mercato_balance", "mercato_receipt"}
    assert tools[TOOL]["mercato/price"] == 10
    assert lines["error"] == ["False"]
    result = json.loads(lines["result"][0])
    assert result["chart"] == "illust" and [e["rank"] for e in result["entries"]] == [1, 2, 3]
    meta = json.loads(lines["meta"][0])
    assert meta["mercato/settlement"] == "SETTLED"
    assert meta["mercato/idempotencyKey"] == "agent-ranking-illust-1"
    receipt = json.loads(lines["receipt"][0])
    assert (receipt["settlement"], receipt["actualSpend"]) == ("SETTLED", 10)
    assert receipt["invocationId"] == meta["mercato/invocationId"]
    balance = json.loads(lines["balance"][0])
    assert balance["reserved"] == 0
    assert demo["apiKey"] not in ran.stdout + ran.stderr

    # The agent's limit holds: lowered to what it has spent today, the next call is refused.
    lowered = mercato(
        demo["env"], f"mercato admin set-key-limit {demo['keyId']} --spend-limit 10 --period day"
    )
    assert lowered.returncode == 0, lowered.stderr
    refused = called_with(entry["url"], entry["headers"], "agent-ranking-manga-1")
    assert refused.is_error is True
    document = refused.structured_content
    assert document["code"] == "KEY_SPEND_LIMIT_REACHED"
    assert (document["limit"], document["used"]) == (10, 10)
