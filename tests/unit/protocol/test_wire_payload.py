"""parse_execution_request: the fingerprinted bytes are exactly the payload the handler gets."""

import json

import pytest

from mercato.protocol import ExecutionRequestError, parse_execution_request


def test_returns_the_raw_payload_bytes_as_sent() -> None:
    payload, raw = parse_execution_request(b'{ "payload" : {"b": 2,  "a": [1, 2]} }')
    assert payload == {"b": 2, "a": [1, 2]}
    assert raw == b'{"b": 2,  "a": [1, 2]}'


def test_duplicate_payload_members_fingerprint_the_one_json_keeps() -> None:
    payload, raw = parse_execution_request(b'{"payload": {"a": 1}, "payload": {"b": 2}}')
    assert payload == {"b": 2}
    assert json.loads(raw) == payload


def test_non_ascii_payload_bytes_are_kept_exactly() -> None:
    body = '{"payload": {"name": "caf\u00e9 \u65e5\u672c"}}'.encode()
    payload, raw = parse_execution_request(body)
    assert raw == '{"name": "caf\u00e9 \u65e5\u672c"}'.encode()
    assert payload["name"] == "caf\u00e9 \u65e5\u672c"


@pytest.mark.parametrize(
    "body",
    [
        b'{"payload": {"a": NaN}}',
        b'{"payload": {"a": Infinity}}',
        '{"payload": {"a": 1}}'.encode("utf-16"),
        b"\xff\xfe",
        b'{"payload": {}}',
        b'{"payload": [1]}',
        b'{"payload": {"a": 1}, "extra": true}',
        b"{}",
        b"[]",
    ],
)
def test_rejects_what_is_not_a_valid_envelope(body: bytes) -> None:
    with pytest.raises(ExecutionRequestError):
        parse_execution_request(body)
