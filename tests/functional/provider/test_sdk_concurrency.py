"""Twenty simultaneous executions of one new key run the handler once (issue 4 acceptance)."""

from __future__ import annotations

import threading

import httpx
import pytest

from builders.provider import AUTH

pytestmark = pytest.mark.functional

CALLERS = 20


def test_twenty_simultaneous_executions_of_one_key_run_the_handler_once(provider_process):
    provider = provider_process
    gate = provider.workdir / "release"
    provider.start("--hold-until", str(gate))
    barrier = threading.Barrier(CALLERS)
    answered = threading.Condition()
    responses: list[httpx.Response] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            barrier.wait(timeout=30)
            response = httpx.post(
                f"{provider.base_url}/v1/executions",
                json={"payload": {"n": 1}},
                headers={**AUTH, "Idempotency-Key": "one-key"},
                timeout=60,
            )
        except BaseException as exc:
            errors.append(exc)
            response = None
        with answered:
            if response is not None:
                responses.append(response)
            answered.notify_all()

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    # The winner is held inside the handler until every loser has answered from the record.
    with answered:
        assert answered.wait_for(lambda: len(responses) + len(errors) >= CALLERS - 1, timeout=60)
    gate.touch()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [202] * (CALLERS - 1)
    winner = next(r for r in responses if r.status_code == 200)
    assert winner.json()["outcome"] == "SUCCEEDED"
    losers = [r.json() for r in responses if r.status_code == 202]
    assert {body["outcome"] for body in losers} == {"UNKNOWN_OUTCOME"}
    assert {body["correlationId"] for body in losers} == {winner.json()["correlationId"]}
    assert provider.runs() == 1

    replay = httpx.post(
        f"{provider.base_url}/v1/executions",
        json={"payload": {"n": 1}},
        headers={**AUTH, "Idempotency-Key": "one-key"},
        timeout=30,
    )
    assert replay.content == winner.content
    assert provider.runs() == 1
