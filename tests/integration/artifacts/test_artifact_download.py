"""`GET /v1/invocations/{id}/artifacts/{artifactId}`: owner only, settled only, whole, verified."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.artifacts import FakeFetcher, fake_target, make_invocation, settled_call
from mercato.artifacts import flows, service
from mercato.artifacts.models import ArtifactBlob
from mercato.artifacts.store import LocalBlobStore, open_blob_store
from mercato.db.runtime import Runtime
from mercato.web.app import create_app

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
DIGEST = hashlib.sha256(PNG).hexdigest()
PATH = "/v1/invocations/{call}/artifacts/{artifact}"


@pytest.fixture
def app_client(blob_runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(blob_runtime), raise_server_exceptions=False) as client:
        yield client


def _ingested_call(runtime: Runtime, **kwargs: str) -> tuple[dict[str, str], str]:
    account_id, call = settled_call(runtime, {"chart": PNG}, **kwargs)
    fetcher = FakeFetcher()
    fetcher.serve(PNG)
    assert flows.ingest_once(runtime, fetcher, resolve_target=fake_target) == 1
    key, _ = make_api_key(runtime.db, account_id)
    return bearer(key), call


def _assert_problem(response: object, status: int, code: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    assert response.json()["code"] == code  # type: ignore[attr-defined]


def test_the_owner_downloads_the_exact_bytes(blob_runtime: Runtime, app_client: TestClient) -> None:
    auth, call = _ingested_call(blob_runtime)

    response = app_client.get(PATH.format(call=call, artifact="chart"), headers=auth)

    assert response.status_code == 200
    assert response.content == PNG
    assert hashlib.sha256(response.content).hexdigest() == DIGEST
    assert response.headers["content-type"] == "image/png"
    assert response.headers["content-length"] == str(len(PNG))
    assert response.headers["etag"] == f'"{DIGEST}"'
    assert response.headers["accept-ranges"] == "none"
    assert response.headers["cache-control"] == "private"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_text_media_types_are_served_exactly_as_declared(
    blob_runtime: Runtime, app_client: TestClient
) -> None:
    account_id = make_account(blob_runtime.db)
    data = b"rank,title\n1,a\n"
    manifest = [
        {
            "artifactId": "table",
            "digest": hashlib.sha256(data).hexdigest(),
            "mediaType": "text/csv",
            "size": len(data),
        }
    ]
    call = make_invocation(blob_runtime, account_id=account_id, manifest=manifest)
    fetcher = FakeFetcher()
    fetcher.serve(data)
    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)
    key, _ = make_api_key(blob_runtime.db, account_id)

    response = app_client.get(PATH.format(call=call, artifact="table"), headers=bearer(key))

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv"
    assert response.content == data


def test_another_account_gets_404(blob_runtime: Runtime, app_client: TestClient) -> None:
    _, call = _ingested_call(blob_runtime)
    stranger = make_account(blob_runtime.db, "stranger@example.com")
    key, _ = make_api_key(blob_runtime.db, stranger)

    response = app_client.get(PATH.format(call=call, artifact="chart"), headers=bearer(key))

    assert response.status_code == 404
    assert PNG[:8] not in response.content


def test_without_credentials_the_answer_is_401(
    blob_runtime: Runtime, app_client: TestClient
) -> None:
    _, call = _ingested_call(blob_runtime)
    response = app_client.get(PATH.format(call=call, artifact="chart"))
    _assert_problem(response, 401, "UNAUTHENTICATED")


@pytest.mark.parametrize("range_value", ["bytes=0-99", "bytes=0-", "garbage"])
def test_a_range_header_is_refused_with_416(
    blob_runtime: Runtime, app_client: TestClient, range_value: str
) -> None:
    auth, call = _ingested_call(blob_runtime)

    response = app_client.get(
        PATH.format(call=call, artifact="chart"), headers={**auth, "Range": range_value}
    )

    _assert_problem(response, 416, "RANGE_NOT_SUPPORTED")
    assert PNG[:8] not in response.content


@pytest.mark.parametrize("settlement", ["PENDING", "RELEASED", "REFUNDED"])
def test_a_call_that_is_not_settled_gets_409(
    blob_runtime: Runtime, app_client: TestClient, settlement: str
) -> None:
    account_id, call = settled_call(blob_runtime, {"chart": PNG}, settlement=settlement)
    key, _ = make_api_key(blob_runtime.db, account_id)

    response = app_client.get(PATH.format(call=call, artifact="chart"), headers=bearer(key))

    _assert_problem(response, 409, "INVOCATION_NOT_SETTLED")
    assert response.json()["settlement"] == settlement


def test_an_artifact_not_yet_ingested_gets_503_with_retry_after(
    blob_runtime: Runtime, app_client: TestClient
) -> None:
    account_id, call = settled_call(blob_runtime, {"chart": PNG})
    key, _ = make_api_key(blob_runtime.db, account_id)

    response = app_client.get(PATH.format(call=call, artifact="chart"), headers=bearer(key))

    _assert_problem(response, 503, "ARTIFACT_NOT_READY")
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["retryAfter"] == int(response.headers["retry-after"])  # DESIGN §5


def test_an_artifact_missing_from_the_manifest_gets_404(
    blob_runtime: Runtime, app_client: TestClient
) -> None:
    auth, call = _ingested_call(blob_runtime)
    response = app_client.get(PATH.format(call=call, artifact="other"), headers=auth)
    _assert_problem(response, 404, "ARTIFACT_NOT_FOUND")


def test_a_corrupted_blob_is_refused_and_never_served(
    blob_runtime: Runtime, app_client: TestClient
) -> None:
    auth, call = _ingested_call(blob_runtime)
    tampered = PNG[:100] + b"\x00" + PNG[101:]  # same length, one byte flipped
    store = open_blob_store(blob_runtime)
    if isinstance(store, LocalBlobStore):
        store.path_for(DIGEST).write_bytes(tampered)
    else:
        with blob_runtime.db.transaction() as session:
            session.get_one(ArtifactBlob, DIGEST).data = tampered

    response = app_client.get(PATH.format(call=call, artifact="chart"), headers=auth)

    _assert_problem(response, 500, "ARTIFACT_CORRUPTED")
    assert PNG[:8] not in response.content and tampered[:8] not in response.content
    # The entry goes back to the queue, so the worker pulls a good copy again.
    with blob_runtime.db.read() as session:
        (pending,) = service.pending_ingestions(session, invocation_id=call)
    assert pending.last_error is not None
    fetcher = FakeFetcher()
    fetcher.serve(PNG)
    flows.ingest_once(blob_runtime, fetcher, resolve_target=fake_target)
    healed = app_client.get(PATH.format(call=call, artifact="chart"), headers=auth)
    assert healed.status_code == 200 and healed.content == PNG


def test_a_blob_missing_from_the_store_is_refused(runtime: Runtime) -> None:
    auth, call = _ingested_call(runtime)
    store = open_blob_store(runtime)
    assert isinstance(store, LocalBlobStore)
    store.path_for(DIGEST).unlink()

    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.get(PATH.format(call=call, artifact="chart"), headers=auth)

    _assert_problem(response, 500, "ARTIFACT_CORRUPTED")
