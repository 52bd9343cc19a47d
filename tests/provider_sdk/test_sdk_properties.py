"""Property: any interleaving of executions and reconciliations keeps the spec 3.2 invariants."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from mercato.provider import SqlIdempotencyStore, create_provider_app
from provider_sdk.support import AUTH, CREDENTIAL, CountingHandler

KEYS = ["k0", "k1", "k2"]
PAYLOADS = [{"a": 1}, {"a": 2}, {"fail": "NOPE"}]

steps = st.lists(
    st.tuples(
        st.sampled_from(["execute", "reconcile"]),
        st.sampled_from(KEYS),
        st.sampled_from(range(len(PAYLOADS))),
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture
def app_under_test(store_url: str) -> Iterator[tuple[TestClient, CountingHandler]]:
    handler = CountingHandler()
    store = SqlIdempotencyStore(store_url)
    with TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store)) as client:
        yield client, handler
    store.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps)
def test_first_execution_decides_every_later_answer(app_under_test, steps) -> None:
    client, handler = app_under_test
    prefix = uuid.uuid4().hex  # a fresh key space per example, over one store
    first: dict[str, tuple[int, bytes, int]] = {}  # key -> (payload index, body, status)
    calls_before = handler.calls
    for action, key, index in steps:
        full_key = f"{prefix}-{key}"
        if action == "execute":
            response = client.post(
                "/v1/executions",
                json={"payload": PAYLOADS[index]},
                headers={**AUTH, "Idempotency-Key": full_key},
            )
            if key not in first:
                first[key] = (index, response.content, response.status_code)
                assert response.json()["outcome"] in {"SUCCEEDED", "DEFINED_FAILURE"}
            elif first[key][0] == index:
                assert (response.content, response.status_code) == first[key][1:]
            else:
                assert response.status_code == 409
                assert response.json()["errorCode"] == "IDEMPOTENCY_KEY_REUSED"
        else:
            response = client.post(
                "/v1/reconciliations", json={"providerIdempotencyKey": full_key}, headers=AUTH
            )
            if key in first:
                assert (response.content, response.status_code) == first[key][1:]
            else:
                assert response.status_code == 503
                assert response.json()["outcome"] == "RETRYABLE_BEFORE_ACCEPT"
    assert handler.calls - calls_before == len(first)
