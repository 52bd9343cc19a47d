"""Classify a provider's raw answer into one of the four outcomes (DESIGN.md §3, spec 3.1).

A pure function: no I/O, no clock. Anything that is not a valid (outcome, HTTP status) pair is
UNKNOWN_OUTCOME, because only a well-formed answer can prove what the provider did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson

from mercato.protocol import Envelope, EnvelopeError, Outcome, parse_envelope


class AnswerLike(Protocol):
    """What the classifier reads from `mercato.dispatch.calls.RawAnswer`."""

    @property
    def status(self) -> int | None: ...

    @property
    def body(self) -> bytes | None: ...

    @property
    def error(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Classified:
    """The outcome of one answer; `envelope` is set only for a valid envelope."""

    outcome: Outcome
    envelope: Envelope | None
    reason: str

    @property
    def definite(self) -> bool:
        """True when the answer settles the call (success or defined failure)."""
        return self.outcome in (Outcome.SUCCEEDED, Outcome.DEFINED_FAILURE)


def _unknown(reason: str) -> Classified:
    return Classified(Outcome.UNKNOWN_OUTCOME, None, reason)


def classify(answer: AnswerLike) -> Classified:
    """Map one raw answer to its outcome; every doubt is UNKNOWN_OUTCOME."""
    if answer.error is not None:
        return _unknown(f"transport:{answer.error}")
    status = answer.status
    if status is None:
        return _unknown("transport:no_status")
    if 300 <= status < 400:
        return _unknown("redirect")
    if answer.body is None:
        return _unknown("no_body")
    try:
        decoded = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return _unknown("malformed_json")
    try:
        envelope = parse_envelope(decoded, status)
    except (EnvelopeError, TypeError, ValueError) as exc:
        return _unknown(f"invalid_envelope:{exc}")
    if envelope.outcome is Outcome.UNKNOWN_OUTCOME:
        return Classified(Outcome.UNKNOWN_OUTCOME, envelope, "provider_unknown")
    return Classified(envelope.outcome, envelope, "envelope")
