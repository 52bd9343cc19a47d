"""Hard per-key spend limits (DESIGN §8): counted and refused inside the acceptance program, on
both stores, through the invoke route; released calls give their points back, replays cost
nothing, other keys are not limited, and each period starts again at its UTC boundary."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from builders.accounts import make_api_key
from builders.invocation_world import PRICE, World, running_world
from builders.invocations import ScriptedProvider, ServerThread, defined
from mercato.accounts.models import ApiKey
from mercato.invocations import spend
from mercato.invocations.spend import Period
from mercato.ledger import service as ledger


def _limited(world: World, points: int, period: Period = Period.DAY) -> tuple[str, str]:
    """A new key of the caller with `points` per `period`: (plaintext, key id)."""
    api_key, key_id = make_api_key(world.runtime.db, world.caller_id, name="agent")
    _set(world, key_id, (points, period))
    return api_key, key_id


def _set(world: World, key_id: str, limit: tuple[int, Period] | None) -> spend.KeySpend:
    with world.runtime.db.transaction() as session:
        return spend.set_limit(
            session, key_id=key_id, account_id=None, limit=limit, now=world.clock.now()
        )


def _spent(world: World, key_id: str) -> int | None:
    with world.runtime.db.read() as session:
        key = session.get(ApiKey, key_id)
        assert key is not None
        return spend.spend_of(key, world.clock.now()).spent_in_period


def _grant(world: World, points: int) -> None:
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=world.caller_id, amount=points, now=world.clock.now())


@pytest.fixture
def slow_world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider, provider_timeout_seconds=30.0) as built:
        yield built


def test_64_concurrent_calls_on_a_key_with_room_for_10_settle_exactly_10(
    slow_world: World,
) -> None:
    world = slow_world
    _grant(world, 10_000)  # points are never what stops them
    api_key, key_id = _limited(world, 10 * PRICE)
    barrier = threading.Barrier(64)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    with ServerThread(world.client.app) as server:

        def call(n: int) -> None:
            headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"storm-{n}"}
            with httpx.Client(base_url=server.url, timeout=60) as http:
                barrier.wait()
                response = http.post(
                    "/v1/services/acme.echo/versions/v1:invoke", json={"n": n}, headers=headers
                )
            with lock:
                responses.append(response)

        threads = [threading.Thread(target=call, args=(n,)) for n in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)

    assert len(responses) == 64
    settled = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 402]
    assert len(settled) == 10 and len(refused) == 54, sorted(r.status_code for r in responses)
    assert {r.json()["code"] for r in refused} == {"KEY_SPEND_LIMIT_REACHED"}
    assert all(r.json()["limit"] == 10 * PRICE for r in refused)
    assert sum(world.provider.executions.values()) == 10
    assert len(world.invocations()) == 10
    assert world.reservations("SETTLED") == 10 and world.reservations("HELD") == 0
    assert world.balances() == (10_100 - 10 * PRICE, 0)
    assert _spent(world, key_id) == 10 * PRICE
    assert world.ledger_balanced()


def test_the_refusal_is_a_402_naming_limit_use_and_reset_and_consumes_nothing(
    world: World,
) -> None:
    api_key, key_id = _limited(world, PRICE + 5)
    assert world.invoke(key="a", api_key=api_key).status_code == 200
    before = world.get("/v1/rate-limit", api_key=api_key).json()

    refused = world.invoke(key="b", api_key=api_key)

    assert refused.status_code == 402
    assert refused.headers["content-type"].startswith("application/problem+json")
    body = refused.json()
    assert body["code"] == "KEY_SPEND_LIMIT_REACHED" and body["status"] == 402
    assert (body["limit"], body["used"]) == (PRICE + 5, PRICE)
    now = world.clock.now()
    tomorrow = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    assert body["resetsAt"] == tomorrow.isoformat().replace("+00:00", "Z")
    assert world.balances() == (100 - PRICE, 0)
    assert len(world.invocations()) == 1
    assert world.get("/v1/rate-limit", api_key=api_key).json() == before
    assert _spent(world, key_id) == PRICE
    # Refused, the key is not taken: a later call with the same Idempotency-Key is a new call.
    _set(world, key_id, (2 * PRICE, Period.DAY))
    assert world.invoke(key="b", api_key=api_key).status_code == 200


def test_points_come_before_the_key_limit(world: World) -> None:
    api_key, _ = _limited(world, 0)
    assert world.balances() == (100, 0)
    with world.runtime.db.transaction() as session:  # the account can no longer pay
        ledger.reserve(
            session, account_id=world.caller_id, amount=95, reference="held", now=world.clock.now()
        )
    refused = world.invoke(key="poor", api_key=api_key)
    assert refused.status_code == 402 and refused.json()["code"] == "INSUFFICIENT_POINTS"


def test_a_release_gives_the_points_back_and_a_replay_costs_nothing(world: World) -> None:
    api_key, key_id = _limited(world, PRICE)
    world.provider.script(defined(400, "NOPE"))
    failed = world.invoke(key="fails", api_key=api_key)
    assert failed.status_code == 422 and failed.json()["code"] == "PROVIDER_DEFINED_FAILURE"
    assert _spent(world, key_id) == 0

    assert world.invoke(key="works", api_key=api_key).status_code == 200
    assert _spent(world, key_id) == PRICE
    # Replays of both calls answer as before and take nothing, though the key is at its limit.
    assert world.invoke(key="works", api_key=api_key).status_code == 200
    assert world.invoke(key="fails", api_key=api_key).status_code == 422
    assert _spent(world, key_id) == PRICE
    assert world.invoke(key="third", api_key=api_key).status_code == 402
    assert sum(world.provider.executions.values()) == 2
    assert world.ledger_balanced()


def test_another_key_of_the_same_account_is_not_limited(world: World) -> None:
    api_key, _ = _limited(world, 0)
    assert world.invoke(key="x", api_key=api_key).status_code == 402
    assert world.invoke(key="x").status_code == 200  # the world's own key: no limit
    assert world.invoke(key="y").status_code == 200


def test_a_limit_set_later_counts_the_calls_of_its_period(world: World) -> None:
    api_key, key_id = make_api_key(world.runtime.db, world.caller_id, name="later")
    world.provider.script(defined(400, "NOPE"))
    assert world.invoke(key="released", api_key=api_key).status_code == 422
    assert world.invoke(key="one", api_key=api_key).status_code == 200
    assert world.invoke(key="two", api_key=api_key).status_code == 200

    found = _set(world, key_id, (3 * PRICE, Period.MONTH))

    assert found.spent_in_period == 2 * PRICE  # the released call is not counted
    assert world.invoke(key="three", api_key=api_key).status_code == 200
    assert world.invoke(key="four", api_key=api_key).status_code == 402
    assert _set(world, key_id, None).spent_in_period is None
    assert world.invoke(key="four", api_key=api_key).status_code == 200


@pytest.mark.parametrize("period", [Period.DAY, Period.WEEK, Period.MONTH])
def test_each_period_starts_again_at_its_utc_boundary(world: World, period: Period) -> None:
    api_key, key_id = _limited(world, PRICE, period)
    assert world.invoke(key="first", api_key=api_key).status_code == 200
    assert world.invoke(key="second", api_key=api_key).status_code == 402
    ends = spend.period_end(period, world.clock.now())
    assert ends is not None
    world.clock.advance((ends - world.clock.now()).total_seconds() - 1)
    assert world.invoke(key="second", api_key=api_key).status_code == 402  # one second early
    world.clock.advance(1)
    assert _spent(world, key_id) == 0
    assert world.invoke(key="second", api_key=api_key).status_code == 200
    assert world.invoke(key="third", api_key=api_key).status_code == 402


def test_a_total_limit_never_resets(world: World) -> None:
    api_key, key_id = _limited(world, PRICE, Period.TOTAL)
    assert world.invoke(key="first", api_key=api_key).status_code == 200
    world.clock.advance(400 * 86400)
    refused = world.invoke(key="second", api_key=api_key)
    assert refused.status_code == 402 and refused.json()["resetsAt"] is None
    assert _spent(world, key_id) == PRICE


def test_period_starts_follow_utc_calendars() -> None:
    at = dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.UTC)  # a Thursday
    assert spend.period_start(Period.DAY, at) == dt.datetime(2026, 12, 31, tzinfo=dt.UTC)
    assert spend.period_start(Period.WEEK, at) == dt.datetime(2026, 12, 28, tzinfo=dt.UTC)
    assert spend.period_end(Period.WEEK, at) == dt.datetime(2027, 1, 4, tzinfo=dt.UTC)
    assert spend.period_end(Period.MONTH, at) == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    february = dt.datetime(2028, 2, 10, tzinfo=dt.UTC)
    assert spend.period_end(Period.MONTH, february) == dt.datetime(2028, 3, 1, tzinfo=dt.UTC)
    assert spend.period_start(Period.TOTAL, at) == spend.EPOCH
    assert spend.period_end(Period.TOTAL, at) is None
