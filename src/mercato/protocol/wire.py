"""Paths, headers and the execution/reconciliation request bodies (spec 2.3, 2.5, 4.2)."""

from __future__ import annotations

import json
from typing import Any

HEALTH_LIVE_PATH = "/health/live"
HEALTH_READY_PATH = "/health/ready"
EXECUTIONS_PATH = "/v1/executions"
RECONCILIATIONS_PATH = "/v1/reconciliations"
ARTIFACTS_PATH_PREFIX = "/v1/artifacts/"

AUTHORIZATION_HEADER = "Authorization"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_MAX_LENGTH = 191
CONFORMANCE_KEY_PREFIX = "platform-conformance:"


class ExecutionRequestError(ValueError):
    """The request body breaks the envelope contract (answered with 400)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_object(raw: bytes) -> dict[str, Any]:
    try:
        # RFC 8259: UTF-8 only, and NaN/Infinity are not JSON.
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExecutionRequestError("body is not JSON") from exc
    if not isinstance(body, dict):
        raise ExecutionRequestError("body must be a JSON object")
    return body


def _payload_span(raw: bytes) -> bytes:
    """Return the exact bytes of the `payload` member's value within `raw`.

    With duplicate members the last one wins, as it does for `json.loads`, so the
    fingerprinted bytes are always the payload the handler receives.
    """
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    span: str | None = None
    # Walk the top-level object member by member to find payload's raw span.
    index = text.index("{") + 1
    while True:
        while text[index] in " \t\r\n,":
            index += 1
        if text[index] == "}":
            break
        key, index = decoder.raw_decode(text, index)
        while text[index] in " \t\r\n:":
            index += 1
        start = index
        _, index = decoder.raw_decode(text, index)
        if key == "payload":
            span = text[start:index]
    if span is None:
        raise ExecutionRequestError("payload is missing")
    return span.encode("utf-8")


def parse_execution_request(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """Return (payload, raw payload bytes); only `payload`, a non-empty object, is allowed."""
    body = _decode_object(raw)
    extra = set(body) - {"payload"}
    if extra:
        raise ExecutionRequestError(f"unknown top-level fields: {sorted(extra)}")
    payload = body.get("payload")
    if not isinstance(payload, dict) or not payload:
        raise ExecutionRequestError("payload must be a non-empty JSON object")
    return payload, _payload_span(raw)


def parse_reconciliation_request(raw: bytes) -> str:
    """Return the providerIdempotencyKey of a reconciliation request."""
    body = _decode_object(raw)
    extra = set(body) - {"providerIdempotencyKey"}
    if extra:
        raise ExecutionRequestError(f"unknown top-level fields: {sorted(extra)}")
    key = body.get("providerIdempotencyKey")
    if not isinstance(key, str) or not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH:
        raise ExecutionRequestError("providerIdempotencyKey must be a 1-191 character string")
    return key
