"""The client's invoke: one Idempotency-Key per logical call, reused on every retry."""

from __future__ import annotations

import uuid

import httpx
import pytest

from client_sdk.support import Script, Sleeps, pending, problem, receipt, settled
from mercato.client import (
    IdempotencyKeyInUse,
    InvocationPending,
    MercatoClient,
    RateLimitExceeded,
    RetryPolicy,
    TransportFailed,
)

API_KEY = "mercato_live_" + "S3cr3t" * 6
INVOKE = "POST /v1/services/acme.echo/versions/v1:invoke"
RECEIPT = "GET /v1/invocations/inv_1"


def client(script: Script, sleeps: Sleeps, **policy: float) -> MercatoClient:
    return MercatoClient(
        "http://mercato.test",
        API_KEY,
        transport=script.transport(),
        sleep=sleeps,
        retry=RetryPolicy(**policy),  # type: ignore[arg-type]
    )


def request_for(exc: type[httpx.TransportError]) -> httpx.TransportError:
    return exc("boom", request=httpx.Request("POST", "http://mercato.test"))


@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout],
)
def test_network_error_resends_with_the_same_generated_key(
    failure: type[httpx.TransportError],
) -> None:
    script = Script(request_for(failure), request_for(failure), settled(result={"n": 1}))
    sleeps = Sleeps()

    result = client(script, sleeps).invoke("acme.echo", "v1", {"n": 1})

    assert result.result == {"n": 1} and result.invocation_id == "inv_1"
    keys = script.keys()
    assert len(keys) == 3 and len(set(keys)) == 1
    assert keys[0] is not None and uuid.UUID(keys[0]).version == 4
    assert result.idempotency_key == keys[0]
    assert script.bodies() == [{"n": 1}] * 3
    assert len(sleeps.calls) == 2


def test_each_logical_call_gets_its_own_key_and_a_given_key_is_used_verbatim() -> None:
    script = Script(settled(), settled(), settled())
    mercato = client(script, Sleeps())

    mercato.invoke("acme.echo", "v1", {"n": 1})
    mercato.invoke("acme.echo", "v1", {"n": 1})
    mercato.invoke("acme.echo", "v1", {"n": 1}, idempotency_key="order-42")

    first, second, given = script.keys()
    assert first != second
    assert given == "order-42"
    assert all(r.headers["Authorization"] == f"Bearer {API_KEY}" for r in script.requests)


def test_network_retries_are_bounded_and_the_error_carries_the_key() -> None:
    script = Script(*[request_for(httpx.ReadError) for _ in range(3)])

    with pytest.raises(TransportFailed) as caught:
        client(script, Sleeps(), network_retries=2).invoke(
            "acme.echo", "v1", {"n": 1}, idempotency_key="resume-me"
        )

    assert caught.value.idempotency_key == "resume-me"
    assert script.keys() == ["resume-me"] * 3
    assert caught.value.code == "NETWORK_ERROR"


def test_a_pending_call_is_followed_through_its_receipt_then_replayed_for_the_result() -> None:
    script = Script(
        pending(),
        receipt(status="PENDING"),
        request_for(httpx.ReadError),  # a receipt poll that fails is just polled again
        receipt(status="SUCCEEDED"),
        settled(result={"final": True}),
    )
    sleeps = Sleeps()

    result = client(script, sleeps).invoke("acme.echo", "v1", {"n": 1})

    assert result.result == {"final": True}
    assert script.lines() == [INVOKE, RECEIPT, RECEIPT, RECEIPT, INVOKE]
    keys = script.keys()
    assert len(keys) == 2 and keys[0] == keys[1]
    assert len(sleeps.calls) == 3  # two poll intervals and one network backoff


def test_a_call_pending_past_the_wait_budget_raises_with_the_key_to_resume() -> None:
    script = Script(pending(), *[receipt(status="PENDING") for _ in range(50)])
    sleeps = Sleeps()

    with pytest.raises(InvocationPending) as caught:
        client(script, sleeps, max_wait_seconds=5.0).invoke("acme.echo", "v1", {"n": 1})

    assert caught.value.invocation_id == "inv_1"
    assert caught.value.idempotency_key == script.keys()[0]
    assert len(script.keys()) == 1  # never re-sent as a new call
    assert sum(sleeps.calls) <= 5.0


def test_429_waits_retry_after_then_resends_the_same_key() -> None:
    limited = problem(
        429,
        "RATE_LIMIT_EXCEEDED",
        {"Retry-After": "2"},
        policy="standard",
        limit=1,
        windowSeconds=2,
        retryAfter=2,
    )
    script = Script(limited, settled())
    sleeps = Sleeps()

    client(script, sleeps).invoke("acme.echo", "v1", {"n": 1})

    assert sleeps.calls == [2.0]
    first, second = script.keys()
    assert first == second


def test_429_beyond_the_wait_budget_raises_at_once_with_the_quota() -> None:
    limited = problem(
        429,
        "RATE_LIMIT_EXCEEDED",
        {"Retry-After": "600"},
        policy="standard",
        limit=60,
        windowSeconds=600,
        retryAfter=600,
    )
    script = Script(limited)
    sleeps = Sleeps()

    with pytest.raises(RateLimitExceeded) as caught:
        client(script, sleeps, max_wait_seconds=30.0).invoke("acme.echo", "v1", {"n": 1})

    error = caught.value
    assert sleeps.calls == []
    assert (error.status, error.code, error.retry_after) == (429, "RATE_LIMIT_EXCEEDED", 600.0)
    assert (error.policy, error.limit, error.window_seconds) == ("standard", 60, 600)
    assert error.idempotency_key == script.keys()[0]


def test_key_in_use_waits_and_retries_the_same_key_until_the_first_finishes() -> None:
    in_use = problem(409, "IDEMPOTENCY_KEY_IN_USE", {"Retry-After": "1"}, invocationId="inv_1")
    script = Script(in_use, in_use, settled())
    sleeps = Sleeps()

    client(script, sleeps).invoke("acme.echo", "v1", {"n": 1}, idempotency_key="k-1")

    assert script.keys() == ["k-1"] * 3
    assert sleeps.calls == [1.0, 1.0]


def test_key_in_use_without_retry_after_is_raised() -> None:
    script = Script(problem(409, "IDEMPOTENCY_KEY_IN_USE", invocationId="inv_9"))

    with pytest.raises(IdempotencyKeyInUse) as caught:
        client(script, Sleeps()).invoke("acme.echo", "v1", {"n": 1})

    assert caught.value.invocation_id == "inv_9"


def test_bytes_payload_is_sent_unchanged_on_every_attempt() -> None:
    raw = b'{"b": 2, "a": 1}'
    script = Script(request_for(httpx.RemoteProtocolError), settled())

    client(script, Sleeps()).invoke("acme.echo", "v1", raw)

    assert [r.content for r in script.requests] == [raw, raw]


def test_a_zero_retry_after_still_waits_so_the_budget_ends_the_loop() -> None:
    busy = problem(409, "IDEMPOTENCY_KEY_IN_USE", {"Retry-After": "0"})
    script = Script(*[busy for _ in range(100)])
    sleeps = Sleeps()

    with pytest.raises(IdempotencyKeyInUse):
        client(script, sleeps, max_wait_seconds=1.0).invoke("acme.echo", "v1", {"n": 1})

    assert sleeps.calls and all(s > 0 for s in sleeps.calls) and sum(sleeps.calls) <= 1.0
