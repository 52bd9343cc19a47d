"""Every rejection before acceptance consumes nothing: no quota, no points, no key, no call."""

from __future__ import annotations

import pytest

from builders.catalog import hold, release
from builders.invocation_world import SERVICE, World
from mercato.core.clock import utcnow
from mercato.ledger import service as ledger


def assert_nothing_consumed(world: World) -> None:
    assert world.balances() == (100, 0)
    assert world.invocations() == []
    assert sum(world.provider.executions.values()) == 0
    assert world.get("/v1/rate-limit").json()["accepted"] == 0


def assert_problem(response, status: int, code: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert (body["status"], body["code"]) == (status, code)
    return body


def test_unauthenticated_is_401(world: World) -> None:
    response = world.invoke(api_key="mercato_live_" + "x" * 40)
    assert_problem(response, 401, "UNAUTHENTICATED")
    assert "WWW-Authenticate" in response.headers
    assert_nothing_consumed(world)


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "IDEMPOTENCY_KEY_MISSING"),
        ({"Idempotency-Key": ""}, "IDEMPOTENCY_KEY_MISSING"),
        ({"Idempotency-Key": "k" * 192}, "IDEMPOTENCY_KEY_INVALID"),
        ({"Idempotency-Key": "has space"}, "IDEMPOTENCY_KEY_INVALID"),
        ({"Idempotency-Key": "tab\tkey"}, "IDEMPOTENCY_KEY_INVALID"),
    ],
)
def test_idempotency_key_rules(world: World, headers: dict[str, str], code: str) -> None:
    assert_problem(world.invoke(key=None, headers=headers), 400, code)
    assert_nothing_consumed(world)


def test_key_of_191_visible_ascii_is_accepted(world: World) -> None:
    assert world.invoke(key="~" * 191).status_code == 200


def test_duplicate_idempotency_key_header_is_invalid(world: World) -> None:
    response = world.client.post(
        f"/v1/services/{SERVICE}/versions/v1:invoke",
        content=b'{"n":1}',
        headers=[
            ("Authorization", f"Bearer {world.api_key}"),
            ("Idempotency-Key", "a"),
            ("Idempotency-Key", "b"),
        ],
    )
    assert_problem(response, 400, "IDEMPOTENCY_KEY_INVALID")
    assert_nothing_consumed(world)


@pytest.mark.parametrize(
    ("service", "version"),
    [(SERVICE, "v2"), (SERVICE, "latest"), (SERVICE, "1"), ("nobody.home", "v1")],
)
def test_version_must_exist_exactly(world: World, service: str, version: str) -> None:
    assert_problem(world.invoke(service=service, version=version), 404, "VERSION_NOT_FOUND")
    assert_nothing_consumed(world)


def test_held_listing_is_unavailable_until_released(world: World) -> None:
    hold_id = hold(world.runtime, SERVICE)
    assert_problem(world.invoke(), 403, "LISTING_UNAVAILABLE")
    assert_nothing_consumed(world)
    release(world.runtime, hold_id)
    assert world.invoke().status_code == 200  # the key was not consumed by the rejection


def test_unapproved_connection_is_503(world: World) -> None:
    world.rename_connection()
    assert_problem(world.invoke(), 503, "PROVIDER_NOT_APPROVED")
    assert_nothing_consumed(world)


def test_body_over_request_max_bytes_is_413(world: World) -> None:
    body = world.invoke(raw=b'{"pad":"' + b"x" * 300 + b'"}')
    assert_problem(body, 413, "REQUEST_TOO_LARGE")
    assert_nothing_consumed(world)


@pytest.mark.parametrize(
    "raw", [b"", b"not json", b"[]", b"{}", b'"x"', b"null", b'{"n": 1'], ids=repr
)
def test_body_must_be_a_non_empty_json_object(world: World, raw: bytes) -> None:
    assert_problem(world.invoke(raw=raw), 422, "REQUEST_SCHEMA_VIOLATION")
    assert_nothing_consumed(world)


def test_schema_violation_lists_json_pointers(world: World) -> None:
    body = assert_problem(
        world.invoke({"n": "seven", "tags": "x"}), 422, "REQUEST_SCHEMA_VIOLATION"
    )
    assert [e["pointer"] for e in body["errors"]] == ["/n", "/tags"]
    assert_nothing_consumed(world)
    assert world.invoke({"n": 7}).status_code == 200  # same key, now valid: a new attempt


def test_insufficient_points_is_402(world: World) -> None:
    with world.runtime.db.transaction() as session:
        ledger.reserve(
            session, account_id=world.caller_id, amount=95, reference="other", now=utcnow()
        )
    assert_problem(world.invoke(), 402, "INSUFFICIENT_POINTS")
    assert world.invocations() == []
    assert world.balances() == (5, 95)
    assert world.get("/v1/rate-limit").json()["accepted"] == 0


def test_same_key_other_body_or_version_is_422_and_consumes_nothing(world: World) -> None:
    assert world.invoke({"n": 1}).status_code == 200
    assert_problem(world.invoke({"n": 2}), 422, "IDEMPOTENCY_KEY_REUSED")
    assert_problem(world.invoke({"n": 1}, version="v2"), 422, "IDEMPOTENCY_KEY_REUSED")
    # Canonical JSON: the same members in another order and spacing are the same request.
    assert world.invoke(raw=b'{ "n" : 1 }').status_code == 200
    assert world.balances() == (90, 0)
    assert sum(world.provider.executions.values()) == 1
    assert world.get("/v1/rate-limit").json()["accepted"] == 1


def test_keys_are_scoped_to_the_account(world: World) -> None:
    from builders.accounts import make_account, make_api_key

    other = make_account(world.runtime.db, "other@example.com", password=None)
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=other, amount=50, now=utcnow())
    other_key, _ = make_api_key(world.runtime.db, other)
    mine = world.invoke({"n": 1}).json()["invocationId"]
    theirs = world.invoke({"n": 1}, api_key=other_key).json()["invocationId"]
    assert mine != theirs
    assert world.balances() == (90, 0) and world.balances(other) == (40, 0)
    # Another account's receipt is 404, like one that does not exist.
    assert world.get(f"/v1/invocations/{mine}", api_key=other_key).status_code == 404
