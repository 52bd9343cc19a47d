"""A replay (decision 0420): one statement reads the call, the caller's quota window as it
stands and the proof of a key served from memory, and nothing of the answer is kept in memory.
Whatever changed since (a refund, a staff resolution, a revocation, the window, the policy),
a replay answers what a process without memory answers, and spends nothing."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from builders.invocation_world import World, answer
from builders.invocations import unknown
from mercato.accounts import service as accounts
from mercato.accounts.models import ApiKey
from mercato.core.clock import utcnow
from mercato.db.aio import observing
from mercato.invocations import service as invocations
from mercato.invocations.schemas import Decision
from mercato.ledger import service as ledger


def warm(world: World, key: str, body: bytes = b'{"n": 1}') -> Any:
    """Call with `key` twice, so that the process knows the key is used (`hints.used`) and
    its caller's key (`hints.keys`): the next call with it is a warm replay. The second
    answer."""
    world.invoke(raw=body, key=key)
    again = world.invoke(raw=body, key=key)
    hints = world.runtime.hints
    assert hints is not None and (world.caller_id, key) in hints.used
    return again


def statements_of(world: World, call: Any) -> tuple[list[str], list[str]]:
    """The units of work and the SQL statements on the async database while `call` runs."""
    seen: list[tuple[str, str]] = []
    with observing(world.runtime.adb, lambda kind, detail: seen.append((kind, detail))):
        call()
    units = [detail for kind, detail in seen if kind == "unit"]
    sql = [detail for kind, detail in seen if kind == "sql"]
    return units, [s for s in sql if s.strip().upper() not in ("BEGIN", "COMMIT", "ROLLBACK")]


def test_a_warm_replay_is_one_read_of_one_statement(world: World) -> None:
    first = world.invoke({"n": 1}, key="k")
    warm(world, "k")
    units, sql = statements_of(world, lambda: world.invoke({"n": 1}, key="k"))
    assert units == ["read"]
    assert len(sql) == 1 and sql[0].lstrip().startswith("SELECT"), sql
    replayed = world.invoke({"n": 1}, key="k")
    assert (replayed.status_code, replayed.content) == (200, first.content)
    assert world.balances() == (90, 0)
    assert sum(world.provider.executions.values()) == 1


def test_a_replay_after_a_refund_answers_as_without_memory(
    world: World, memoryless: TestClient
) -> None:
    first = warm(world, "k")
    invocation_id = first.json()["invocationId"]
    with world.runtime.db.transaction() as session:
        reservation_id = invocations.reservation_of(session, invocation_id=invocation_id)
        ledger.refund(session, reservation_id=reservation_id, now=utcnow())
        invocations.mark_refunded(session, invocation_id=invocation_id, now=utcnow())
    replayed = world.invoke({"n": 1}, key="k")
    assert answer(replayed) == answer(world.invoke(key="k", client=memoryless))
    assert replayed.content == first.content  # a replay's body is the first answer's
    receipt = world.get(f"/v1/invocations/{invocation_id}").json()
    assert (receipt["settlement"], receipt["actualSpend"]) == ("REFUNDED", 0)
    assert world.balances() == (100, 0)


def test_a_replay_after_a_staff_resolution_shows_it(world: World, memoryless: TestClient) -> None:
    world.provider.script(unknown())
    pending = world.invoke({"n": 1}, key="k")
    assert pending.status_code == 202
    invocation_id = pending.json()["invocationId"]
    world.clock.advance(120)  # past the lease of the call's own request
    assert world.invoke({"n": 1}, key="k").status_code == 202  # warm now: still pending
    with world.runtime.db.transaction() as session:
        invocations.resolve(
            session,
            invocation_id=invocation_id,
            decision=Decision.FAILED,
            reason="the provider never ran it",
            actor="staff-1",
            now=world.clock.now(),
        )
    replayed = world.invoke({"n": 1}, key="k")
    assert answer(replayed) == answer(world.invoke(key="k", client=memoryless))
    assert replayed.status_code == 502 and replayed.json()["code"] == "PROVIDER_UNAVAILABLE"
    assert world.balances() == (100, 0)


@pytest.mark.parametrize("body", [b'{"n": 1}', b'{"n": 2}'], ids=["same body", "another body"])
def test_a_warm_replay_with_a_revoked_key_is_refused_before_anything_else(
    world: World, memoryless: TestClient, body: bytes
) -> None:
    warm(world, "k")
    with world.runtime.db.transaction() as session:
        for key_id in session.scalars(select(ApiKey.id)):
            accounts.revoke_api_key(session, key_id=key_id, account_id=None, now=utcnow())
    refused = world.invoke(raw=body, key="k")
    assert answer(refused) == answer(world.invoke(raw=body, key="k", client=memoryless))
    assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHENTICATED"
    assert "ratelimit" not in refused.headers
    assert world.balances() == (90, 0)


def test_a_warm_replay_of_another_body_is_key_reused_with_the_window(
    world: World, memoryless: TestClient
) -> None:
    warm(world, "k")
    units, sql = statements_of(world, lambda: world.invoke({"n": 2}, key="k"))
    assert units == ["read"] and len(sql) == 1, (units, sql)  # its headers read with it
    reused = world.invoke({"n": 2}, key="k")
    assert answer(reused) == answer(world.invoke(raw=b'{"n": 2}', key="k", client=memoryless))
    assert (reused.status_code, reused.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    policy = world.runtime.settings.default_quota_policy
    assert reused.headers["RateLimit"].startswith(f'"{policy}";r=')
    assert world.balances() == (90, 0)
    assert sum(world.provider.executions.values()) == 1


def test_a_replay_while_the_first_is_in_flight_is_in_use(
    world: World, memoryless: TestClient
) -> None:
    world.invoke({"n": 5}, key="other")  # the process remembers the caller and the facts
    invocation_id = world.accept_without_sending("k")
    first = world.invoke({"n": 1}, key="k")
    hints = world.runtime.hints
    assert hints is not None and (world.caller_id, "k") in hints.used  # refused, yet used
    units, _ = statements_of(world, lambda: world.invoke({"n": 1}, key="k"))
    assert units == ["read"]  # a warm one reads, and tries no accept
    again = world.invoke({"n": 1}, key="k")
    for refused in (first, again):
        assert (refused.status_code, refused.json()["code"]) == (409, "IDEMPOTENCY_KEY_IN_USE")
        assert refused.json()["invocationId"] == invocation_id
        assert 1 <= int(refused.headers["Retry-After"]) <= 30
        assert refused.json()["retryAfter"] == int(refused.headers["Retry-After"])  # DESIGN §5
    assert answer(again) == answer(world.invoke(key="k", client=memoryless))
    assert "RateLimit" in again.headers
    assert world.balances() == (80, 10)  # the call in flight holds its points


def test_the_ratelimit_headers_of_a_replay_show_the_window_as_it_stands(
    world: World, memoryless: TestClient
) -> None:
    settings = world.runtime.settings
    policy, limit = settings.default_quota_policy, settings.default_quota_limit
    window = settings.default_quota_window_seconds
    first = warm(world, "k")
    assert first.headers["RateLimit"].startswith(f'"{policy}";r={limit - 1};')
    assert world.invoke({"n": 2}, key="k2").status_code == 200  # a call takes a slot
    replayed = world.invoke({"n": 1}, key="k")
    assert replayed.headers["RateLimit"].startswith(f'"{policy}";r={limit - 2};')
    assert answer(replayed) == answer(world.invoke(key="k", client=memoryless))
    world.clock.advance(window)  # a new window: nothing taken in it yet
    replayed = world.invoke({"n": 1}, key="k")
    assert replayed.headers["RateLimit"].startswith(f'"{policy}";r={limit};')
    assert answer(replayed) == answer(world.invoke(key="k", client=memoryless))
    world.set_quota(limit=3, window_seconds=3600)  # the account's own policy from now on
    assert world.invoke({"n": 3}, key="k3").status_code == 200
    replayed = world.invoke({"n": 1}, key="k")
    assert replayed.headers["RateLimit-Policy"] == '"tight";q=3;w=3600'
    assert replayed.headers["RateLimit"].startswith('"tight";r=2;')
    assert answer(replayed) == answer(world.invoke(key="k", client=memoryless))
    assert replayed.content == first.content


def test_a_key_replayed_before_the_facts_were_remembered_is_known_used(world: World) -> None:
    world.accept_without_sending("k")  # another process's call, in flight
    world.clock.advance(60)  # its lease ran out: a replay answers 202
    assert world.invoke({"n": 1}, key="k").status_code == 202  # nothing remembered yet
    assert world.invoke({"n": 2}, key="fresh").status_code == 200  # the facts remembered now
    units, sql = statements_of(world, lambda: world.invoke({"n": 1}, key="k"))
    assert units == ["read"] and len(sql) == 1, (units, sql)  # no accept tried first
    assert world.balances() == (80, 10)
