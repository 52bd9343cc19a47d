"""The SDK's answer when its idempotency store fails (issue 19 item 5).

`RETRYABLE_BEFORE_ACCEPT` tells the platform that the handler never started for the key, which
lets it send the call again and, in the end, release the caller's points. The SDK may say so
only with proof; after the handler may have started, a store failure is `UNKNOWN_OUTCOME`
(202). A wrapper over the real store fails at each of its writes in turn, before or after the
write lands, telling the truth about what it wrote or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import pytest
from starlette.testclient import TestClient

from mercato.protocol import Envelope
from mercato.provider import (
    SqlIdempotencyStore,
    StoredRecord,
    StoreUnavailable,
    create_provider_app,
)
from provider_sdk.support import AUTH, CREDENTIAL, CountingHandler

T = TypeVar("T")
KEY = "mercato:inv_0001"
PAYLOAD = {"n": 1}
STATUS = {"SUCCEEDED": 200, "UNKNOWN_OUTCOME": 202, "RETRYABLE_BEFORE_ACCEPT": 503}


class FailingStore:
    """The real store whose `at`-th write (accept or finish) fails `when` it is made.

    `claims_nothing_written` is what the failure says; after a write that landed it is a lie
    (a lost acknowledgement), which the SDK must survive too. `down` makes every call fail.
    """

    def __init__(
        self,
        inner: SqlIdempotencyStore,
        *,
        at: int = 0,
        when: Literal["before", "after"] = "before",
        claims_nothing_written: bool = True,
    ) -> None:
        self.inner = inner
        self.at, self.when, self.claims = at, when, claims_nothing_written
        self.writes = 0
        self.down = False

    def _fail(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(f"injected: {what}", nothing_written=self.claims)

    def _write(self, write: Callable[[], T]) -> T:
        self.writes += 1
        if self.down or (self.writes == self.at and self.when == "before"):
            raise self._fail("before the write")
        done = write()
        if self.writes == self.at:
            raise self._fail("after the write")
        return done

    def _read(self, read: Callable[[], T]) -> T:
        if self.down:
            raise self._fail("store down")
        return read()

    def accept(self, **arguments: Any) -> tuple[StoredRecord, bool]:
        return self._write(lambda: self.inner.accept(**arguments))

    def finish(self, *, key: str, envelope: Envelope) -> StoredRecord:
        return self._write(lambda: self.inner.finish(key=key, envelope=envelope))

    def get(self, key: str) -> StoredRecord | None:
        return self._read(lambda: self.inner.get(key))

    def list_accepted(self) -> list[StoredRecord]:
        return self._read(self.inner.list_accepted)

    def check(self) -> None:
        self._read(self.inner.check)


@pytest.fixture
def inner(store_url: str) -> Iterator[SqlIdempotencyStore]:
    store = SqlIdempotencyStore(store_url)
    yield store
    store.close()


def _client(store: FailingStore, handler: CountingHandler) -> TestClient:
    return TestClient(create_provider_app(handler, credential=CREDENTIAL, store=store))


def _execute(client: TestClient) -> tuple[str, Any]:
    response = client.post(
        "/v1/executions", json={"payload": PAYLOAD}, headers={**AUTH, "Idempotency-Key": KEY}
    )
    outcome = response.json()["outcome"]
    assert response.status_code == STATUS[outcome], response.text
    return outcome, response.json()


def _reconcile(client: TestClient) -> tuple[str, Any]:
    response = client.post(
        "/v1/reconciliations", json={"providerIdempotencyKey": KEY}, headers=AUTH
    )
    outcome = response.json()["outcome"]
    assert response.status_code == STATUS[outcome], response.text
    return outcome, response.json()


def _assert_truthful(
    answer: tuple[str, Any], inner: SqlIdempotencyStore, handler: CountingHandler
) -> None:
    """RETRYABLE only when the handler never ran and nothing is stored for the key."""
    outcome, body = answer
    if outcome == "RETRYABLE_BEFORE_ACCEPT":
        assert handler.calls == 0 and inner.get(KEY) is None
    if handler.calls or inner.get(KEY) is not None:
        assert outcome != "RETRYABLE_BEFORE_ACCEPT"
    if outcome == "SUCCEEDED":
        stored = inner.get(KEY)
        assert stored is not None and stored.is_final
        assert body["correlationId"] == stored.correlation_id


@pytest.mark.parametrize("claims_nothing_written", [True, False])
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_failure_at_each_write_never_claims_a_started_call_was_not_accepted(
    inner: SqlIdempotencyStore,
    at: int,
    when: Literal["before", "after"],
    claims_nothing_written: bool,
) -> None:
    """Two requests with one key (a call and its redispatch), the `at`-th write failing."""
    store = FailingStore(inner, at=at, when=when, claims_nothing_written=claims_nothing_written)
    handler = CountingHandler()
    with _client(store, handler) as client:
        for _ in range(2):
            _assert_truthful(_execute(client), inner, handler)
        assert handler.calls <= 1
        store.at = 0  # healed: reconciliation tells the stored truth
        outcome, _ = _reconcile(client)
    stored = inner.get(KEY)
    if stored is None:
        assert outcome == "RETRYABLE_BEFORE_ACCEPT" and handler.calls == 0
    elif stored.is_final:
        assert outcome == "SUCCEEDED" and handler.calls == 1
    else:
        assert outcome == "UNKNOWN_OUTCOME"


def test_a_redispatch_whose_accept_fails_gets_the_first_answer_not_retryable(
    inner: SqlIdempotencyStore,
) -> None:
    """The handler ran for the key; the retry's write fails having written nothing."""
    store = FailingStore(inner, at=3, when="before", claims_nothing_written=True)
    handler = CountingHandler()
    with _client(store, handler) as client:
        first = _execute(client)
        again = _execute(client)
    assert first[0] == again[0] == "SUCCEEDED"
    assert again[1] == first[1] and handler.calls == 1


def test_a_redispatch_while_the_outcome_is_unstored_is_unknown(inner: SqlIdempotencyStore) -> None:
    store = FailingStore(inner, at=2, when="before")  # the final outcome is never stored
    handler = CountingHandler()
    with _client(store, handler) as client:
        assert _execute(client)[0] == "UNKNOWN_OUTCOME"
        store.at = 3  # and the redispatch's accept fails, having written nothing
        assert _execute(client)[0] == "UNKNOWN_OUTCOME"
    assert handler.calls == 1


def test_a_marker_that_landed_despite_the_failure_runs_the_handler_once(
    inner: SqlIdempotencyStore,
) -> None:
    store = FailingStore(inner, at=1, when="after", claims_nothing_written=True)
    handler = CountingHandler()
    with _client(store, handler) as client:
        assert _execute(client)[0] == "SUCCEEDED"
        assert _execute(client)[0] == "SUCCEEDED"
    assert handler.calls == 1


def test_a_write_that_provably_wrote_nothing_on_a_new_key_is_retryable(
    inner: SqlIdempotencyStore,
) -> None:
    store = FailingStore(inner, at=1, when="before", claims_nothing_written=True)
    handler = CountingHandler()
    with _client(store, handler) as client:
        assert _execute(client)[0] == "RETRYABLE_BEFORE_ACCEPT"
        assert _execute(client)[0] == "SUCCEEDED"  # the platform's redispatch
    assert handler.calls == 1


@pytest.mark.parametrize("key_known", [False, True])
def test_a_store_that_cannot_be_read_either_answers_unknown(
    inner: SqlIdempotencyStore, key_known: bool
) -> None:
    """No read, no proof: even a key never seen is UNKNOWN_OUTCOME, for it may have been."""
    store = FailingStore(inner)
    handler = CountingHandler()
    with _client(store, handler) as client:
        if key_known:
            assert _execute(client)[0] == "SUCCEEDED"
        store.down = True
        assert _execute(client)[0] == "UNKNOWN_OUTCOME"
        assert _reconcile(client)[0] == "UNKNOWN_OUTCOME"
        store.down = False
        assert _reconcile(client)[0] == ("SUCCEEDED" if key_known else "RETRYABLE_BEFORE_ACCEPT")
    assert handler.calls == int(key_known)
