"""The response envelope of spec 2.4 and the outcome/status table of spec 3.1."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

ERROR_CODE_MAX_LENGTH = 64
_MEMBERS = frozenset({"outcome", "correlationId", "result", "errorCode", "httpStatus"})


class Outcome(enum.StrEnum):
    SUCCEEDED = "SUCCEEDED"
    DEFINED_FAILURE = "DEFINED_FAILURE"
    RETRYABLE_BEFORE_ACCEPT = "RETRYABLE_BEFORE_ACCEPT"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"


class EnvelopeError(ValueError):
    """The body is not a valid envelope; the platform treats it as UNKNOWN_OUTCOME."""


def status_matches(outcome: Outcome, status: int) -> bool:
    """Return whether HTTP `status` is the one spec 3.1 requires for `outcome`."""
    if outcome is Outcome.SUCCEEDED:
        return 200 <= status < 300
    if outcome is Outcome.DEFINED_FAILURE:
        return 400 <= status < 600
    if outcome is Outcome.RETRYABLE_BEFORE_ACCEPT:
        return status == 503
    return status == 202


@dataclass(frozen=True, slots=True)
class Envelope:
    """One provider answer; members that do not apply are None and omitted on the wire."""

    outcome: Outcome
    correlation_id: str
    result: dict[str, Any] | None = None
    error_code: str | None = None
    http_status: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.correlation_id, str) or not self.correlation_id:
            raise EnvelopeError("correlationId must be a non-empty string")
        if self.result is not None and not isinstance(self.result, dict):
            raise EnvelopeError("result must be an object")
        if self.error_code is not None and (
            not isinstance(self.error_code, str)
            or not 1 <= len(self.error_code) <= ERROR_CODE_MAX_LENGTH
        ):
            raise EnvelopeError("errorCode must be 1-64 characters")
        if self.http_status is not None and (
            isinstance(self.http_status, bool) or not isinstance(self.http_status, int)
        ):
            raise EnvelopeError("httpStatus must be an integer")
        if self.outcome is Outcome.DEFINED_FAILURE:
            if self.error_code is None or self.http_status is None:
                raise EnvelopeError("DEFINED_FAILURE requires errorCode and httpStatus")
            if not 400 <= self.http_status < 600:
                raise EnvelopeError("DEFINED_FAILURE httpStatus must be 4xx or 5xx")
        elif self.error_code is not None:
            raise EnvelopeError("errorCode applies only to DEFINED_FAILURE")
        if self.outcome is Outcome.SUCCEEDED and self.result is None:
            raise EnvelopeError("SUCCEEDED requires a result object")
        if self.outcome is not Outcome.SUCCEEDED and self.result is not None:
            raise EnvelopeError("result applies only to SUCCEEDED")

    @property
    def status(self) -> int:
        """The HTTP status this envelope must be sent with."""
        if self.http_status is not None:
            return self.http_status
        return {
            Outcome.SUCCEEDED: 200,
            Outcome.RETRYABLE_BEFORE_ACCEPT: 503,
            Outcome.UNKNOWN_OUTCOME: 202,
        }.get(self.outcome, 500)

    def to_json(self) -> dict[str, Any]:
        """Return the wire form, omitting members that do not apply."""
        body: dict[str, Any] = {"outcome": self.outcome.value, "correlationId": self.correlation_id}
        if self.result is not None:
            body["result"] = self.result
        if self.error_code is not None:
            body["errorCode"] = self.error_code
        if self.http_status is not None:
            body["httpStatus"] = self.http_status
        return body


def parse_envelope(body: Any, http_status: int) -> Envelope:
    """Parse and check a decoded envelope against the HTTP status it came with.

    Raises EnvelopeError for anything spec 2.4/3.1 does not allow: unknown or missing members,
    an unknown outcome name, or a status that does not match the outcome.
    """
    if not isinstance(body, dict):
        raise EnvelopeError("envelope must be a JSON object")
    extra = set(body) - _MEMBERS
    if extra:
        raise EnvelopeError(f"unknown envelope members: {sorted(extra)}")
    try:
        outcome = Outcome(str(body.get("outcome")))
    except ValueError as exc:
        raise EnvelopeError("unknown outcome") from exc
    envelope = Envelope(
        outcome=outcome,
        correlation_id=body.get("correlationId"),  # type: ignore[arg-type]
        result=body.get("result"),
        error_code=body.get("errorCode"),
        http_status=body.get("httpStatus"),
    )
    if not status_matches(outcome, http_status):
        raise EnvelopeError(f"HTTP {http_status} does not match outcome {outcome.value}")
    if envelope.http_status is not None and envelope.http_status != http_status:
        raise EnvelopeError("httpStatus does not equal the HTTP status")
    return envelope
