"""The async client drives the same flows: same key on every retry, typed errors."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from client_sdk.support import Script, Sleeps, pending, problem, receipt, settled
from mercato.client import AsyncMercatoClient, ProviderDefinedFailure, RetryPolicy


def run_invoke(script: Script, sleeps: Sleeps, **kwargs: str) -> object:
    async def go() -> object:
        async with AsyncMercatoClient(
            "http://mercato.test",
            "mercato_live_async",
            transport=script.transport(),
            sleep=sleeps.async_sleep,
            retry=RetryPolicy(),
        ) as mercato:
            return await mercato.invoke("acme.echo", "v1", {"n": 1}, **kwargs)

    return asyncio.run(go())


def test_async_invoke_survives_a_drop_a_429_and_a_pending_answer_under_one_key() -> None:
    limited = problem(429, "RATE_LIMIT_EXCEEDED", {"Retry-After": "1"}, retryAfter=1)
    script = Script(
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        limited,
        pending(),
        receipt(status="SUCCEEDED"),
        settled(result={"async": True}),
    )
    sleeps = Sleeps()

    result = run_invoke(script, sleeps)

    assert getattr(result, "result", None) == {"async": True}
    keys = script.keys()
    assert len(keys) == 4 and len(set(keys)) == 1
    assert 1.0 in sleeps.calls


def test_async_errors_are_typed() -> None:
    script = Script(problem(422, "PROVIDER_DEFINED_FAILURE", errorCode="E", providerHttpStatus=404))

    with pytest.raises(ProviderDefinedFailure) as caught:
        run_invoke(script, Sleeps(), idempotency_key="given")

    assert caught.value.provider_http_status == 404
    assert caught.value.idempotency_key == "given"
