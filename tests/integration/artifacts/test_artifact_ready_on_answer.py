"""A settled call's artifacts download as soon as its answer is sent, with no worker running:
the first download pulls from the provider, verifies, stores and serves (decision 0206)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.artifacts import LoopbackArtifactProvider
from builders.catalog import approve_connection, example_contract, publish
from mercato.artifacts import flows, service
from mercato.artifacts.store import open_blob_store
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.web.app import create_app

CREDENTIAL = "ready-credential-0123456789abcdef"
OBJECTS = {
    "chart": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 33,
    "table": b"rank,title\n1,first\n2,second\n",
    "empty": b"",
}
INVOKE = "/v1/services/acme.ready/versions/v1:invoke"


@pytest.fixture
def provider() -> Iterator[LoopbackArtifactProvider]:
    running = LoopbackArtifactProvider(OBJECTS, credential=CREDENTIAL)
    yield running
    running.stop()


@pytest.fixture
def caller(blob_runtime: Runtime, provider: LoopbackArtifactProvider) -> dict[str, str]:
    """The service published on the loopback provider, and a caller's key with 100 points."""
    owner = make_account(blob_runtime.db, "provider@example.com", password=None)
    with blob_runtime.db.transaction() as session:
        connection_id = providers.create_connection(
            session,
            owner_id=owner,
            name="ready",
            base_url=provider.url,
            credential=CREDENTIAL,
            settings=blob_runtime.settings,
            now=blob_runtime.clock.now(),
        ).id
    approve_connection(blob_runtime, connection_id)
    contract = example_contract(requestSchema={"type": "object", "additionalProperties": True})
    publish(blob_runtime, connection_id, service_code="acme.ready", contract=contract)
    account = make_account(blob_runtime.db, "caller@example.com", password=None)
    with blob_runtime.db.transaction() as session:
        ledger.grant(session, account_id=account, amount=100, now=blob_runtime.clock.now())
    key, _ = make_api_key(blob_runtime.db, account)
    return bearer(key)


@pytest.fixture
def http(blob_runtime: Runtime) -> Iterator[TestClient]:
    provider_client = ProviderClient(blob_runtime.settings)
    app = create_app(dataclasses.replace(blob_runtime, provider=provider_client))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
    provider_client.close()


def _invoke(http: TestClient, caller: dict[str, str], key: str) -> str:
    response = http.post(INVOKE, json={"n": 1}, headers={**caller, "Idempotency-Key": key})
    assert response.status_code == 200, response.text
    assert [a["artifactId"] for a in response.json()["artifacts"]] == list(OBJECTS)
    call: str = response.json()["invocationId"]
    return call


def test_each_artifact_downloads_right_after_the_answer_without_a_worker(
    blob_runtime: Runtime,
    provider: LoopbackArtifactProvider,
    caller: dict[str, str],
    http: TestClient,
) -> None:
    call = _invoke(http, caller, "ready-1")

    for artifact_id, data in OBJECTS.items():
        path = f"/v1/invocations/{call}/artifacts/{artifact_id}"
        first = http.get(path, headers=caller)
        assert first.status_code == 200, first.text
        assert first.content == data
        assert first.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
        again = http.get(path, headers=caller)  # served from the platform's store now
        assert again.status_code == 200 and again.content == data

    assert sorted(provider.fetches) == sorted(provider.served)  # one pull per object
    with blob_runtime.db.read() as session:
        assert service.pending_ingestions(session, invocation_id=call) == []
    store = open_blob_store(blob_runtime)
    assert all(store.exists(digest) for digest in provider.served)


def test_a_provider_serving_wrong_bytes_gets_none_of_them_written_or_stored(
    blob_runtime: Runtime,
    provider: LoopbackArtifactProvider,
    caller: dict[str, str],
    http: TestClient,
) -> None:
    digest = hashlib.sha256(OBJECTS["chart"]).hexdigest()
    wrong = OBJECTS["chart"][:100] + b"\x00" + OBJECTS["chart"][101:]  # same length
    provider.served[digest] = wrong
    call = _invoke(http, caller, "ready-2")
    path = f"/v1/invocations/{call}/artifacts/chart"

    refused = http.get(path, headers=caller)

    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "ARTIFACT_NOT_READY"
    assert int(refused.headers["retry-after"]) >= 1
    assert wrong[:64] not in refused.content
    store = open_blob_store(blob_runtime)
    assert not store.exists(digest)
    assert not store.exists(hashlib.sha256(wrong).hexdigest())
    with blob_runtime.db.read() as session:
        pending = service.pending_ingestions(session, invocation_id=call)
    assert "chart" in {artifact.entry.artifact_id for artifact in pending}

    # The worker's pull stays the retry path: once the provider serves the right bytes again,
    # one ingestion pass stores them and the download is served from the store.
    provider.served[digest] = OBJECTS["chart"]
    client = ProviderClient(blob_runtime.settings)
    try:
        flows.ingest_once(blob_runtime, client, resolve_target=providers.get_dispatch_target)
    finally:
        client.close()
    fetched = len(provider.fetches)
    healed = http.get(path, headers=caller)
    assert healed.status_code == 200 and healed.content == OBJECTS["chart"]
    assert len(provider.fetches) == fetched
