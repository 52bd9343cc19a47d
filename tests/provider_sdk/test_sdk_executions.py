"""POST /v1/executions through the ASGI app: spec 4.2 execution rules in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from mercato.protocol import Envelope
from mercato.provider import (
    DefinedFailureError,
    SqlIdempotencyStore,
    StoreUnavailable,
    Success,
    create_provider_app,
)
from provider_sdk.support import AUTH, CREDENTIAL, CountingHandler

PATH = "/v1/executions"


@pytest.fixture
def store(store_url: str) -> Iterator[SqlIdempotencyStore]:
    the_store = SqlIdempotencyStore(store_url)
    yield the_store
    the_store.close()


@pytest.fixture
def handler() -> CountingHandler:
    return CountingHandler()


@pytest.fixture
def client(store: SqlIdempotencyStore, handler: CountingHandler) -> Iterator[TestClient]:
    app = create_provider_app(handler, credential=CREDENTIAL, store=store)
    with TestClient(app) as test_client:
        yield test_client


def execute(client: TestClient, key: str | None, payload: object, **extra: object):
    headers = dict(AUTH)
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(PATH, json={"payload": payload, **extra}, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {CREDENTIAL}"},
        {"Authorization": f"Bearer {CREDENTIAL}x"},
        {"Authorization": "Bearer"},
    ],
)
def test_missing_or_wrong_credential_is_401_before_anything_else(client, store, handler, headers):
    response = client.post(PATH, content=b"not json", headers={**headers, "Idempotency-Key": "k"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    response = client.post(
        PATH, json={"payload": {"a": 1}}, headers={**headers, "Idempotency-Key": "k"}
    )
    assert response.status_code == 401
    assert handler.calls == 0
    assert store.get("k") is None


@pytest.mark.parametrize(
    "body",
    [
        {"payload": {"a": 1}, "extra": 1},
        {"payload": {"a": 1}, "metadata": {}},
        {"payload": {}},
        {"payload": []},
        {"payload": "text"},
        {"payload": None},
        {},
    ],
)
def test_envelope_violations_are_400_and_store_nothing(client, store, handler, body):
    response = client.post(PATH, json=body, headers={**AUTH, "Idempotency-Key": "k"})
    assert response.status_code == 400
    assert "outcome" not in response.json()
    assert handler.calls == 0
    assert store.get("k") is None


def test_body_that_is_not_json_is_400(client, handler):
    response = client.post(PATH, content=b"{payload", headers={**AUTH, "Idempotency-Key": "k"})
    assert response.status_code == 400
    assert handler.calls == 0


@pytest.mark.parametrize("key", [None, "", "x" * 192, "has space", "caf\u00e9".encode("latin-1")])
def test_missing_or_invalid_idempotency_key_is_400(client, handler, key):
    headers = dict(AUTH)
    if key is not None:
        headers["Idempotency-Key"] = key
    response = client.post(PATH, json={"payload": {"a": 1}}, headers=headers)
    assert response.status_code == 400
    assert handler.calls == 0


def test_key_of_191_characters_is_accepted(client):
    assert execute(client, "k" * 191, {"a": 1}).status_code == 200


def test_success_is_stored_and_replayed_without_rerunning(client, store, handler):
    first = execute(client, "k1", {"a": 1})
    assert first.status_code == 200
    assert first.json()["outcome"] == "SUCCEEDED"
    assert first.json()["result"] == {"echo": {"a": 1}}
    replay = execute(client, "k1", {"a": 1})
    assert replay.status_code == 200
    assert replay.content == first.content
    assert handler.calls == 1
    record = store.get("k1")
    assert record is not None and record.body == first.content


def test_fingerprint_is_over_the_raw_payload_bytes(client, handler):
    headers = {**AUTH, "Idempotency-Key": "raw", "Content-Type": "application/json"}
    assert (
        client.post(PATH, content=b'{"payload":{"a":1,"b":2}}', headers=headers).status_code == 200
    )
    same_bytes = client.post(PATH, content=b'{"payload":{"a":1,"b":2}}', headers=headers)
    assert same_bytes.status_code == 200
    reordered = client.post(PATH, content=b'{"payload":{"b":2,"a":1}}', headers=headers)
    assert reordered.status_code == 409
    assert handler.calls == 1


def test_same_key_other_payload_is_a_409_defined_failure_leaving_the_record(client, store, handler):
    first = execute(client, "k1", {"a": 1})
    conflict = execute(client, "k1", {"a": 2})
    assert conflict.status_code == 409
    body = conflict.json()
    assert body["outcome"] == "DEFINED_FAILURE"
    assert body["httpStatus"] == 409
    assert body["errorCode"] == "IDEMPOTENCY_KEY_REUSED"
    assert set(body) == {"outcome", "correlationId", "errorCode", "httpStatus"}
    assert handler.calls == 1
    record = store.get("k1")
    assert record is not None and record.body == first.content
    assert execute(client, "k1", {"a": 1}).content == first.content


def test_handler_rejection_is_a_stored_defined_failure(client, store, handler):
    first = execute(client, "junk", {"fail": "MEANINGLESS_PAYLOAD"})
    assert first.status_code == 422
    assert first.json() == {
        "outcome": "DEFINED_FAILURE",
        "correlationId": first.json()["correlationId"],
        "errorCode": "MEANINGLESS_PAYLOAD",
        "httpStatus": 422,
    }
    assert execute(client, "junk", {"fail": "MEANINGLESS_PAYLOAD"}).content == first.content
    assert execute(client, "junk", {"other": 1}).status_code == 409
    reconciled = client.post(
        "/v1/reconciliations", json={"providerIdempotencyKey": "junk"}, headers=AUTH
    )
    assert reconciled.content == first.content
    assert handler.calls == 1


def test_handler_may_raise_defined_failure_error(store):
    def handler(payload):
        raise DefinedFailureError("NOT_FOUND_THING", 404)

    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store)) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 404
    assert response.json()["errorCode"] == "NOT_FOUND_THING"
    record = store.get("k")
    assert record is not None and record.is_final


def test_async_handler(store):
    async def handler(payload):
        return Success({"async": True})

    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store)) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 200
    assert response.json()["result"] == {"async": True}


def test_handler_exception_after_accept_is_unknown_and_stays_accepted(client, store, handler):
    first = execute(client, "k", {"raise": True})
    assert first.status_code == 202
    assert first.json() == {
        "outcome": "UNKNOWN_OUTCOME",
        "correlationId": first.json()["correlationId"],
    }
    record = store.get("k")
    assert record is not None and not record.is_final
    assert record.correlation_id == first.json()["correlationId"]
    again = execute(client, "k", {"raise": True})
    assert again.status_code == 202
    assert again.json()["correlationId"] == record.correlation_id
    assert handler.calls == 1


@pytest.mark.parametrize("returned", [None, {"not": "an outcome"}, Success({"x": float("nan")})])
def test_handler_returning_something_unsendable_is_unknown(store, returned):
    with TestClient(
        create_provider_app(lambda p: returned, credential=CREDENTIAL, store=store)
    ) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 202
    assert response.json()["outcome"] == "UNKNOWN_OUTCOME"
    record = store.get("k")
    assert record is not None and not record.is_final


def test_request_while_the_first_is_running_answers_unknown_from_the_record(client, handler):
    results = {}

    def first_request() -> None:
        results["first"] = execute(client, "slow", {"wait": True})

    thread = threading.Thread(target=first_request)
    thread.start()
    assert handler.started.wait(timeout=30)
    second = execute(client, "slow", {"wait": True})
    reconciled = client.post(
        "/v1/reconciliations", json={"providerIdempotencyKey": "slow"}, headers=AUTH
    )
    handler.release.set()
    thread.join(timeout=30)
    assert second.status_code == 202
    assert second.json()["outcome"] == "UNKNOWN_OUTCOME"
    assert reconciled.status_code == 202
    assert results["first"].status_code == 200
    assert second.json()["correlationId"] == results["first"].json()["correlationId"]
    assert handler.calls == 1


class _FlakyStore:
    """Wraps a real store; fails accept or finish on demand."""

    def __init__(self, inner: SqlIdempotencyStore, *, accept_error=None, finish_error=None):
        self.inner = inner
        self.accept_error = accept_error
        self.finish_error = finish_error

    def accept(self, **kwargs):
        if self.accept_error is not None:
            raise self.accept_error
        return self.inner.accept(**kwargs)

    def finish(self, *, key: str, envelope: Envelope):
        if self.finish_error is not None:
            raise self.finish_error
        return self.inner.finish(key=key, envelope=envelope)

    def get(self, key):
        return self.inner.get(key)

    def list_accepted(self):
        return self.inner.list_accepted()

    def check(self):
        self.inner.check()


def test_store_refusing_the_marker_is_retryable_before_accept(store, handler):
    flaky = _FlakyStore(store, accept_error=StoreUnavailable("down", nothing_written=True))
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=flaky)) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 503
    assert response.json()["outcome"] == "RETRYABLE_BEFORE_ACCEPT"
    assert handler.calls == 0


def test_marker_commit_of_unknown_result_is_unknown_not_retryable(store, handler):
    flaky = _FlakyStore(store, accept_error=StoreUnavailable("commit lost"))
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=flaky)) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 202
    assert response.json()["outcome"] == "UNKNOWN_OUTCOME"
    assert handler.calls == 0


def test_final_outcome_not_committed_is_unknown_and_key_stays_accepted(store, handler):
    flaky = _FlakyStore(store, finish_error=StoreUnavailable("down"))
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=flaky)) as client:
        response = execute(client, "k", {"a": 1})
    assert response.status_code == 202
    assert handler.calls == 1
    record = store.get("k")
    assert record is not None and not record.is_final


def test_oversized_request_is_413_and_stores_nothing(store, handler):
    app = create_provider_app(handler, credential=CREDENTIAL, store=store, max_request_bytes=100)
    with TestClient(app) as client:
        response = execute(client, "k", {"a": "x" * 200})
    assert response.status_code == 413
    assert store.get("k") is None


def test_store_given_as_a_url(store_url, handler):
    app = create_provider_app(handler, credential=CREDENTIAL, store=store_url)
    with TestClient(app) as client:
        assert execute(client, "k", {"a": 1}).status_code == 200
    reopened = SqlIdempotencyStore(store_url)
    try:
        record = reopened.get("k")
        assert record is not None and record.is_final
    finally:
        reopened.close()


@pytest.mark.parametrize("credential", ["", "has space", "caf\u00e9"])
def test_credential_must_be_visible_ascii(store, handler, credential):
    with pytest.raises(ValueError):
        create_provider_app(handler, credential=credential, store=store)


def test_other_payload_while_the_first_is_still_accepted_is_409(client, store, handler):
    store.accept(key="k", fingerprint="f" * 64, payload=b'{"a":1}', correlation_id="job-1")
    response = execute(client, "k", {"a": 2})
    assert response.status_code == 409
    assert response.json()["errorCode"] == "IDEMPOTENCY_KEY_REUSED"
    record = store.get("k")
    assert record is not None and not record.is_final
    assert (record.fingerprint, record.correlation_id) == ("f" * 64, "job-1")
    assert handler.calls == 0
