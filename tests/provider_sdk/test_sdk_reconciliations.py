"""POST /v1/reconciliations: never runs the handler, writes nothing, never claims success."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from mercato.provider import SqlIdempotencyStore, create_provider_app
from provider_sdk.support import AUTH, CREDENTIAL, CountingHandler, drop_postgres_database


@pytest.fixture
def store(store_url: str) -> Iterator[SqlIdempotencyStore]:
    the_store = SqlIdempotencyStore(store_url)
    yield the_store
    the_store.close()


@pytest.fixture
def handler() -> CountingHandler:
    return CountingHandler()


@pytest.fixture
def client(store, handler) -> Iterator[TestClient]:
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store)) as c:
        yield c


def reconcile(client: TestClient, key: str, headers: dict[str, str] = AUTH):
    return client.post("/v1/reconciliations", json={"providerIdempotencyKey": key}, headers=headers)


def test_requires_the_credential(client):
    assert reconcile(client, "k", {}).status_code == 401
    assert reconcile(client, "k", {"Authorization": "Bearer nope"}).status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"providerIdempotencyKey": ""},
        {"providerIdempotencyKey": 5},
        {"providerIdempotencyKey": "k", "x": 1},
    ],
)
def test_malformed_request_is_400(client, body):
    assert client.post("/v1/reconciliations", json=body, headers=AUTH).status_code == 400


def test_unknown_key_with_a_healthy_store_is_retryable_before_accept(client, store, handler):
    response = reconcile(client, "never-sent")
    assert response.status_code == 503
    assert response.json()["outcome"] == "RETRYABLE_BEFORE_ACCEPT"
    assert store.get("never-sent") is None
    assert store.list_accepted() == []
    assert handler.calls == 0


def test_known_key_returns_the_stored_outcome_without_running(client, handler):
    executed = client.post(
        "/v1/executions", json={"payload": {"a": 1}}, headers={**AUTH, "Idempotency-Key": "k"}
    )
    response = reconcile(client, "k")
    assert response.status_code == 200
    assert response.content == executed.content
    assert handler.calls == 1


def test_accepted_but_not_final_is_unknown_outcome(client, store, handler):
    store.accept(key="k", fingerprint="f" * 64, payload=b'{"a":1}', correlation_id="job-1")
    response = reconcile(client, "k")
    assert response.status_code == 202
    assert response.json() == {"outcome": "UNKNOWN_OUTCOME", "correlationId": "job-1"}
    assert handler.calls == 0
    record = store.get("k")
    assert record is not None and not record.is_final


def test_unavailable_store_is_unknown_never_retryable_or_success(
    disposable_store_url, tmp_path, handler
):
    store_url = disposable_store_url
    store = SqlIdempotencyStore(store_url)
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store)) as client:
        if store_url.startswith("sqlite"):
            shutil.rmtree(tmp_path / "provider")
        else:
            store.close()
            drop_postgres_database(store_url)
        response = reconcile(client, "unknown-key")
        ready = client.get("/health/ready")
    store.close()
    assert response.status_code == 202
    assert response.json()["outcome"] == "UNKNOWN_OUTCOME"
    assert ready.status_code == 503
