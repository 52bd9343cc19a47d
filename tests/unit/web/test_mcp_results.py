"""MCP tool names and tool results built from what a provider returned (DESIGN §12)."""

from __future__ import annotations

import datetime as dt
import hashlib
from urllib.parse import unquote

import orjson

from mercato.accounts.schemas import Principal
from mercato.invocations.schemas import InvocationView
from mercato.web.mcp.calls import CallContext, outcome
from mercato.web.mcp.tools import Narrowing, tool_name, version_of


def test_a_tool_is_named_after_its_service_code_and_version() -> None:
    assert tool_name("pixiv.daily-ranking", "v1") == "pixiv_daily-ranking__v1"
    assert version_of("pixiv_daily-ranking__v1") == ("pixiv.daily-ranking", "v1")
    code = "a." + "b" * 70
    whole = f"a_{'b' * 70}__v3"
    digest = hashlib.sha256(whole.encode()).hexdigest()[:8]
    assert tool_name(code, "v3") == f"{whole[:55]}-{digest}"
    assert len(tool_name(code, "v3")) == 64
    assert version_of(tool_name(code, "v3")) is None  # found by its prefix instead
    assert Narrowing.of({tool_name(code, "v3")}).prefixes == {"a." + "b" * 53}
    assert Narrowing.of({"nope", "x__y"}) == Narrowing(frozenset(), frozenset())


def _view(artifacts: list[dict[str, object]]) -> InvocationView:
    now = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
    return InvocationView(
        invocation_id="inv_1",
        account_id="acc_1",
        service_code="acme.echo",
        version="v1",
        contract_digest="0" * 64,
        state="SUCCEEDED",
        settlement="SETTLED",
        price=10,
        has_artifact_contract=True,
        idempotency_key="k",
        fingerprint="f",
        channel="API_KEY",
        error_code=None,
        provider_http_status=None,
        result=orjson.dumps({"ok": True}),
        artifacts=artifacts,
        lease_expires_at=None,
        created_at=now,
        settled_at=now,
        refunded_at=None,
    )


def test_a_provider_named_artifact_stays_one_path_segment_of_its_link() -> None:
    """Abuse: an artifactId is the provider's text (printable, no "/"); its link must not
    leave the download route, add a query or a fragment."""
    hostile = "..?x=1#frag %2e%2e\\evil"
    call = CallContext(
        None,  # type: ignore[arg-type]  # building a result reads nothing
        Principal(account_id="acc_1", channel="API_KEY", is_staff=False, key_id="key_1"),
        base_url="https://mercato.example/",
        request_id=None,
        state={},
    )
    entry = {"artifactId": hostile, "digest": "a" * 64, "mediaType": "text/plain", "size": 3}
    result = outcome(call, "k", _view([entry]))
    assert result.structured_content == {"ok": True}
    link = result.content[1]
    assert link.type == "resource_link"
    prefix = "https://mercato.example/v1/invocations/inv_1/artifacts/"
    assert link.uri.startswith(prefix)
    segment = link.uri.removeprefix(prefix)
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote(segment) == hostile
    assert link.name == hostile and link.mime_type == "text/plain" and link.size == 3
