"""Health probes report only the provider's own state; artifacts are served by digest."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from mercato.provider import (
    Artifact,
    LocalBlobStore,
    SqlIdempotencyStore,
    Success,
    create_provider_app,
)
from provider_sdk.support import AUTH, CREDENTIAL


@pytest.fixture
def store(store_url: str) -> Iterator[SqlIdempotencyStore]:
    the_store = SqlIdempotencyStore(store_url)
    yield the_store
    the_store.close()


def _noop(payload):
    return Success({"ok": True})


def test_probes_need_no_credential_and_report_ready(store):
    with TestClient(create_provider_app(_noop, credential=CREDENTIAL, store=store)) as client:
        assert client.get("/health/live").status_code == 200
        ready = client.get("/health/ready")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}


@pytest.mark.parametrize("answer", [False, "raise"])
def test_own_dependency_not_ready_is_503(store, answer):
    def ready_check() -> bool:
        if answer == "raise":
            raise ConnectionError("my upstream is down")
        return False

    app = create_provider_app(_noop, credential=CREDENTIAL, store=store, ready_check=ready_check)
    with TestClient(app) as client:
        response = client.get("/health/ready")
        assert client.get("/health/live").status_code == 200
    assert response.status_code == 503
    assert "my upstream" not in response.text


def test_async_ready_check(store):
    async def ready_check() -> bool:
        return True

    app = create_provider_app(_noop, credential=CREDENTIAL, store=store, ready_check=ready_check)
    with TestClient(app) as client:
        assert client.get("/health/ready").status_code == 200


def test_blob_store_missing_makes_readiness_fail(store, tmp_path):
    blobs = LocalBlobStore(tmp_path / "blobs")
    app = create_provider_app(_noop, credential=CREDENTIAL, store=store, blobs=blobs)
    with TestClient(app) as client:
        assert client.get("/health/ready").status_code == 200
        shutil.rmtree(tmp_path / "blobs")
        assert client.get("/health/ready").status_code == 503


@pytest.fixture
def artifact_client(store, tmp_path) -> Iterator[tuple[TestClient, LocalBlobStore]]:
    blobs = LocalBlobStore(tmp_path / "blobs")

    def handler(payload):
        data = str(payload["text"]).encode()
        thumb = Artifact.put(blobs, data, media_type="text/plain", artifact_id="thumb-1")
        return Success({"length": len(data)}, artifacts=[thumb])

    app = create_provider_app(handler, credential=CREDENTIAL, store=store, blobs=blobs)
    with TestClient(app) as client:
        yield client, blobs


def test_result_carries_the_manifest_and_the_bytes_are_served(artifact_client):
    client, _ = artifact_client
    response = client.post(
        "/v1/executions",
        json={"payload": {"text": "hello"}},
        headers={**AUTH, "Idempotency-Key": "k"},
    )
    digest = hashlib.sha256(b"hello").hexdigest()
    assert response.json()["result"] == {
        "length": 5,
        "artifacts": [
            {"artifactId": "thumb-1", "digest": digest, "mediaType": "text/plain", "size": 5}
        ],
    }
    served = client.get(f"/v1/artifacts/{digest}", headers=AUTH)
    assert served.status_code == 200
    assert served.content == b"hello"
    assert hashlib.sha256(served.content).hexdigest() == digest


def test_artifact_download_rules(artifact_client):
    client, blobs = artifact_client
    digest = blobs.put(b"bytes")
    assert client.get(f"/v1/artifacts/{digest}").status_code == 401
    assert (
        client.get(f"/v1/artifacts/{digest}", headers={"Authorization": "Bearer x"}).status_code
        == 401
    )
    assert client.get(f"/v1/artifacts/{'0' * 64}", headers=AUTH).status_code == 404
    assert client.get("/v1/artifacts/not-a-digest", headers=AUTH).status_code == 404
    ranged = client.get(f"/v1/artifacts/{digest}", headers={**AUTH, "Range": "bytes=0-1"})
    assert ranged.status_code == 416


def test_no_artifact_route_without_a_blob_store(store):
    with TestClient(create_provider_app(_noop, credential=CREDENTIAL, store=store)) as client:
        assert client.get(f"/v1/artifacts/{'0' * 64}", headers=AUTH).status_code == 404


def test_manifest_naming_a_blob_that_is_not_stored_is_unknown(store, tmp_path):
    blobs = LocalBlobStore(tmp_path / "blobs")

    def handler(payload):
        return Success({}, artifacts=[Artifact("a", "1" * 64, "image/png", 3)])

    app = create_provider_app(handler, credential=CREDENTIAL, store=store, blobs=blobs)
    with TestClient(app) as client:
        response = client.post(
            "/v1/executions", json={"payload": {"a": 1}}, headers={**AUTH, "Idempotency-Key": "k"}
        )
    assert response.status_code == 202
    record = store.get("k")
    assert record is not None and not record.is_final
