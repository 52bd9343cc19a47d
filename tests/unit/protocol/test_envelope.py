"""The provider envelope and the outcome/status table of spec 3.1."""

from __future__ import annotations

from typing import Any

import pytest

from mercato.protocol import (
    Envelope,
    EnvelopeError,
    ExecutionRequestError,
    Outcome,
    parse_envelope,
    parse_execution_request,
    parse_reconciliation_request,
    status_matches,
)


@pytest.mark.parametrize(
    ("outcome", "status", "ok"),
    [
        (Outcome.SUCCEEDED, 200, True),
        (Outcome.SUCCEEDED, 201, True),
        (Outcome.SUCCEEDED, 202, True),
        (Outcome.SUCCEEDED, 302, False),
        (Outcome.SUCCEEDED, 500, False),
        (Outcome.DEFINED_FAILURE, 400, True),
        (Outcome.DEFINED_FAILURE, 599, True),
        (Outcome.DEFINED_FAILURE, 200, False),
        (Outcome.RETRYABLE_BEFORE_ACCEPT, 503, True),
        (Outcome.RETRYABLE_BEFORE_ACCEPT, 502, False),
        (Outcome.UNKNOWN_OUTCOME, 202, True),
        (Outcome.UNKNOWN_OUTCOME, 200, False),
    ],
)
def test_status_table(outcome: Outcome, status: int, ok: bool) -> None:
    assert status_matches(outcome, status) is ok


def test_wire_form_omits_members_that_do_not_apply() -> None:
    assert Envelope(Outcome.UNKNOWN_OUTCOME, "job-1").to_json() == {
        "outcome": "UNKNOWN_OUTCOME",
        "correlationId": "job-1",
    }
    failure = Envelope(Outcome.DEFINED_FAILURE, "job-2", error_code="BAD", http_status=404)
    assert failure.to_json() == {
        "outcome": "DEFINED_FAILURE",
        "correlationId": "job-2",
        "errorCode": "BAD",
        "httpStatus": 404,
    }
    assert failure.status == 404


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"outcome": "SUCCEEDED", "correlationId": "c", "result": {}, "extra": 1}, 200),
        ({"outcome": "MAYBE", "correlationId": "c"}, 202),
        ({"outcome": "SUCCEEDED", "result": {}}, 200),
        ({"outcome": "SUCCEEDED", "correlationId": "c"}, 200),
        ({"outcome": "SUCCEEDED", "correlationId": "c", "result": []}, 200),
        ({"outcome": "DEFINED_FAILURE", "correlationId": "c", "httpStatus": 400}, 400),
        ({"outcome": "DEFINED_FAILURE", "correlationId": "c", "errorCode": "E"}, 400),
        (
            {
                "outcome": "DEFINED_FAILURE",
                "correlationId": "c",
                "errorCode": "E" * 65,
                "httpStatus": 400,
            },
            400,
        ),
        (
            {
                "outcome": "DEFINED_FAILURE",
                "correlationId": "c",
                "errorCode": "E",
                "httpStatus": 400,
            },
            409,
        ),
        ({"outcome": "RETRYABLE_BEFORE_ACCEPT", "correlationId": "c"}, 500),
        ({"outcome": "UNKNOWN_OUTCOME", "correlationId": "c"}, 200),
        ({"outcome": "SUCCEEDED", "correlationId": "c", "result": {}, "httpStatus": 201}, 200),
        ({"outcome": "SUCCEEDED", "correlationId": "c", "result": {}, "errorCode": "E"}, 200),
        (["SUCCEEDED"], 200),
    ],
)
def test_invalid_envelopes_are_refused(body: Any, status: int) -> None:
    with pytest.raises(EnvelopeError):
        parse_envelope(body, status)


def test_valid_envelope_round_trips() -> None:
    body = {"outcome": "SUCCEEDED", "correlationId": "c", "result": {"a": 1}, "httpStatus": 200}
    envelope = parse_envelope(body, 200)
    assert envelope.result == {"a": 1}
    assert envelope.to_json() == body


def test_execution_request_returns_raw_payload_bytes() -> None:
    raw = b'{ "payload" : {"b": 2,  "a": [1, 2]} }'
    payload, payload_bytes = parse_execution_request(raw)
    assert payload == {"b": 2, "a": [1, 2]}
    assert payload_bytes == b'{"b": 2,  "a": [1, 2]}'


@pytest.mark.parametrize(
    "raw",
    [
        b'{"payload": {"a": 1}, "extra": true}',
        b'{"payload": {}}',
        b'{"payload": [1]}',
        b"{}",
        b"not json",
        b'["payload"]',
        b"\xff\xfe",
    ],
)
def test_execution_request_violations(raw: bytes) -> None:
    with pytest.raises(ExecutionRequestError):
        parse_execution_request(raw)


def test_reconciliation_request() -> None:
    assert parse_reconciliation_request(b'{"providerIdempotencyKey": "k1"}') == "k1"
    for raw in (
        b'{"providerIdempotencyKey": ""}',
        b'{"providerIdempotencyKey": "k", "x": 1}',
        b"{}",
        ('{"providerIdempotencyKey": "' + "k" * 192 + '"}').encode(),
    ):
        with pytest.raises(ExecutionRequestError):
            parse_reconciliation_request(raw)
