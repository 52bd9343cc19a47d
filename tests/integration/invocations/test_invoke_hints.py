"""What a serve process keeps in memory (the caller's key, the version's facts: decision 0400)
never outlives a change committed before the next call: revocation, a hold, an unapproved
connection, a new quota policy govern the very next invoke, through the same app or another
one on the same database, with the answer a process without memory gives, and nothing
charged."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from builders.catalog import hold, release
from builders.invocation_world import SERVICE, World, answer
from mercato.accounts import service as accounts
from mercato.accounts.models import ApiKey
from mercato.core.clock import utcnow
from mercato.db.aio import observing
from mercato.db.hints import Hints
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.web.app import create_app


def problem(response: Any) -> tuple[int, bytes | dict[str, Any], dict[str, str]]:
    """What a refusal says: status, body and headers (the request's own id aside)."""
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    return answer(response)


def revoke_keys(world: World) -> None:
    with world.runtime.db.transaction() as session:
        for key_id in session.scalars(select(ApiKey.id)):
            accounts.revoke_api_key(session, key_id=key_id, account_id=None, now=utcnow())


def test_a_warm_invoke_reads_nothing_before_its_accept(world: World) -> None:
    assert world.invoke(key="warm-up").status_code == 200
    seen: list[tuple[str, str]] = []
    with observing(world.runtime.adb, lambda kind, detail: seen.append((kind, detail))):
        assert world.invoke(key="warm").status_code == 200
    units = [detail for kind, detail in seen if kind == "unit"]
    first_write = units.index("statement")
    reads_before = [
        detail for kind, detail in seen[: seen.index(("unit", "statement"))] if kind == "sql"
    ]
    assert units[0] == "read" and first_write == 1
    assert reads_before == []  # the key, the facts and the Idempotency-Key: none read
    assert world.balances() == (80, 0)


def test_a_key_revoked_after_a_call_refuses_the_next_one_as_without_memory(
    world: World, memoryless: TestClient
) -> None:
    assert world.invoke(key="first").status_code == 200
    revoke_keys(world)
    refused = world.invoke(key="second")
    assert problem(refused) == problem(world.invoke(key="second", client=memoryless))
    assert refused.status_code == 401 and "ratelimit" not in refused.headers
    assert world.balances() == (90, 0)
    assert len(world.invocations()) == 1
    assert world.get("/v1/rate-limit").status_code == 401


def test_a_replay_with_a_revoked_key_is_refused(world: World, memoryless: TestClient) -> None:
    assert world.invoke(key="same").status_code == 200
    revoke_keys(world)
    refused = world.invoke(key="same")
    assert problem(refused) == problem(world.invoke(key="same", client=memoryless))
    assert refused.status_code == 401
    assert world.balances() == (90, 0)


def test_a_hold_placed_after_a_call_refuses_the_next_one(
    world: World, memoryless: TestClient
) -> None:
    assert world.invoke(key="first").status_code == 200
    hold_id = hold(world.runtime, SERVICE)
    refused = world.invoke(key="second")
    assert problem(refused) == problem(world.invoke(key="second", client=memoryless))
    assert refused.status_code == 403 and refused.json()["code"] == "LISTING_UNAVAILABLE"
    assert world.balances() == (90, 0)
    release(world.runtime, hold_id)
    assert world.invoke(key="second").status_code == 200
    assert world.balances() == (80, 0)


def test_a_connection_changed_after_a_call_refuses_the_next_one(
    world: World, memoryless: TestClient
) -> None:
    assert world.invoke(key="first").status_code == 200
    world.rename_connection()
    refused = world.invoke(key="second")
    assert problem(refused) == problem(world.invoke(key="second", client=memoryless))
    assert refused.status_code == 503 and refused.json()["code"] == "PROVIDER_NOT_APPROVED"
    assert world.balances() == (90, 0)
    assert sum(world.provider.executions.values()) == 1


def test_a_quota_policy_set_after_a_call_governs_the_next_one(world: World) -> None:
    assert world.invoke(key="first").status_code == 200
    world.set_quota(limit=1, window_seconds=3600)
    taken = world.invoke(key="second")
    assert taken.status_code == 200
    assert taken.headers["RateLimit-Policy"] == '"tight";q=1;w=3600'  # not the remembered one
    refused = world.invoke(key="third")
    assert refused.status_code == 429 and refused.json()["code"] == "RATE_LIMIT_EXCEEDED"
    assert world.balances() == (80, 0)


def test_points_spent_elsewhere_after_a_call_refuse_the_next_one(world: World) -> None:
    assert world.invoke(key="first").status_code == 200
    with world.runtime.db.transaction() as session:
        ledger.reserve(
            session, account_id=world.caller_id, amount=85, reference="other", now=utcnow()
        )
    refused = world.invoke(key="second")
    assert refused.status_code == 402 and refused.json()["code"] == "INSUFFICIENT_POINTS"
    assert world.balances() == (5, 85)
    assert len(world.invocations()) == 1


def test_a_refusal_before_accept_with_remembered_facts_answers_as_without_memory(
    world: World, memoryless: TestClient
) -> None:
    assert world.invoke({"n": 1}, key="k").status_code == 200
    # The same key with another (and oversized) body: the key's reuse is found first.
    raw = b'{"pad":"' + b"x" * 300 + b'"}'
    reused = world.invoke(raw=raw, key="k")
    assert problem(reused) == problem(world.invoke(raw=raw, key="k", client=memoryless))
    assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert world.balances() == (90, 0)


def test_another_process_sees_a_revocation_and_a_hold(world: World) -> None:
    other = Runtime.from_settings(world.runtime.settings, clock=world.clock)
    other = dataclasses.replace(other, provider=world.provider_client, hints=Hints.empty())
    try:
        with TestClient(create_app(other), raise_server_exceptions=False) as second:
            first = world.invoke(key="a")
            assert first.status_code == 200
            assert world.invoke(key="b", client=second).status_code == 200  # both remember now
            # A key the other process accepted: its accept stops at the key, then it replays.
            replayed = world.invoke(key="a", client=second)
            assert (replayed.status_code, replayed.content) == (200, first.content)
            hold_id = hold(other, SERVICE)  # a change made through the other process
            assert world.invoke(key="c").json()["code"] == "LISTING_UNAVAILABLE"
            release(world.runtime, hold_id)
            assert world.invoke(key="c", client=second).status_code == 200
            revoke_keys(world)
            refused = world.invoke(key="d", client=second)
            assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHENTICATED"
            assert world.invoke(key="c", client=second).status_code == 401  # its replay too
            assert world.balances() == (70, 0)
    finally:
        other.db.dispose()
