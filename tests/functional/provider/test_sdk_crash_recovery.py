"""SIGKILL between the accepted marker and the final outcome, then restart (issue 4 acceptance)."""

from __future__ import annotations

import signal

import httpx
import pytest
from echo_provider import make_handler

from builders.provider import AUTH
from mercato.provider import SqlIdempotencyStore, recover_accepted

pytestmark = pytest.mark.functional

PAYLOAD = {"job": "resize", "size": 64}


def _execute(base_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/executions",
        json={"payload": PAYLOAD},
        headers={**AUTH, "Idempotency-Key": key},
        timeout=30,
    )


def _reconcile(base_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/reconciliations",
        json={"providerIdempotencyKey": key},
        headers=AUTH,
        timeout=30,
    )


def _crash_after_accept(provider, key: str) -> None:
    provider.start("--crash-after-accept")
    with pytest.raises(httpx.TransportError):
        _execute(provider.base_url, key)
    assert provider.wait_exit() == -signal.SIGKILL
    assert provider.runs() == 0


def test_killed_after_accept_reconciles_unknown_and_the_hook_resolves_it(provider_process):
    provider = provider_process
    _crash_after_accept(provider, "crash-1")

    provider.start()
    reconciled = _reconcile(provider.base_url, "crash-1")
    assert reconciled.status_code == 202
    assert reconciled.json()["outcome"] == "UNKNOWN_OUTCOME"
    replayed = _execute(provider.base_url, "crash-1")
    assert replayed.status_code == 202
    assert replayed.json()["correlationId"] == reconciled.json()["correlationId"]
    assert provider.runs() == 0

    store = SqlIdempotencyStore(provider.store)
    try:
        handler = make_handler(provider.counter)
        left = recover_accepted(store, handler, idempotent=False)
        assert left.unresolved == ["crash-1"]
        assert provider.runs() == 0
        resolved = recover_accepted(store, handler, idempotent=True)
        assert resolved.resolved == ["crash-1"]
    finally:
        store.close()

    final = _reconcile(provider.base_url, "crash-1")
    assert final.status_code == 200
    assert final.json()["outcome"] == "SUCCEEDED"
    assert final.json()["result"] == {"echo": PAYLOAD}
    assert final.json()["correlationId"] == reconciled.json()["correlationId"]
    assert _execute(provider.base_url, "crash-1").content == final.content
    assert provider.runs() == 1


def test_idempotent_provider_resolves_the_key_itself_on_restart(provider_process):
    provider = provider_process
    _crash_after_accept(provider, "crash-2")

    provider.start("--idempotent")
    final = _reconcile(provider.base_url, "crash-2")
    assert final.status_code == 200
    assert final.json()["outcome"] == "SUCCEEDED"
    assert provider.runs() == 1
