"""Recovery of keys a crash left accepted: re-run only for idempotent handlers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from mercato.provider import SqlIdempotencyStore, create_provider_app, recover_accepted
from provider_sdk.support import AUTH, CREDENTIAL, CountingHandler


@pytest.fixture
def store(store_url: str) -> Iterator[SqlIdempotencyStore]:
    the_store = SqlIdempotencyStore(store_url)
    the_store.accept(key="left", fingerprint="f" * 64, payload=b'{"a": 1}', correlation_id="job-9")
    yield the_store
    the_store.close()


def test_non_idempotent_handler_leaves_keys_unknown_and_lists_them(store):
    handler = CountingHandler()
    report = recover_accepted(store, handler, idempotent=False)
    assert report.unresolved == ["left"]
    assert report.resolved == []
    assert handler.calls == 0
    record = store.get("left")
    assert record is not None and not record.is_final


def test_idempotent_handler_is_rerun_with_the_stored_payload(store):
    handler = CountingHandler()
    report = recover_accepted(store, handler, idempotent=True)
    assert report.resolved == ["left"]
    assert handler.calls == 1
    record = store.get("left")
    assert record is not None and record.is_final
    assert (
        record.body == b'{"outcome":"SUCCEEDED","correlationId":"job-9","result":{"echo":{"a":1}}}'
    )
    assert recover_accepted(store, handler, idempotent=True).resolved == []


def test_failing_rerun_stays_unresolved(store):
    def handler(payload):
        raise RuntimeError("still broken")

    report = recover_accepted(store, handler, idempotent=True)
    assert report.unresolved == ["left"]
    record = store.get("left")
    assert record is not None and not record.is_final


def test_recovery_works_when_called_inside_a_running_event_loop(store):
    handler = CountingHandler()

    async def from_async_code():
        return recover_accepted(store, handler, idempotent=True)

    # Its own thread: this test must not depend on the state of the calling thread's loop.
    reports: list[Any] = []
    runner = threading.Thread(target=lambda: reports.append(asyncio.run(from_async_code())))
    runner.start()
    runner.join()
    (report,) = reports
    assert report.resolved == ["left"]
    assert handler.calls == 1


@pytest.mark.parametrize("idempotent", [True, False])
def test_app_startup_runs_recovery(store, idempotent):
    handler = CountingHandler()
    app = create_provider_app(
        handler, credential=CREDENTIAL, store=store, handler_idempotent=idempotent
    )
    with TestClient(app) as client:
        response = client.post(
            "/v1/reconciliations", json={"providerIdempotencyKey": "left"}, headers=AUTH
        )
    if idempotent:
        assert response.status_code == 200
        assert response.json()["outcome"] == "SUCCEEDED"
        assert response.json()["correlationId"] == "job-9"
    else:
        assert response.status_code == 202
        assert response.json() == {"outcome": "UNKNOWN_OUTCOME", "correlationId": "job-9"}
    assert handler.calls == (1 if idempotent else 0)
