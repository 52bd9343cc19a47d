"""The nine conformance checks of spec 4.3, in order, one function each (criteria: DESIGN.md §7).

Each check makes its own requests through a `Probe` (the provider client's `send`) and returns a
`CheckVerdict` whose detail is evidence only: HTTP status, outcome, latency, a short reason. No
response body and no credential is ever kept.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from mercato.protocol import (
    CONFORMANCE_KEY_PREFIX,
    EXECUTIONS_PATH,
    HEALTH_LIVE_PATH,
    HEALTH_READY_PATH,
    RECONCILIATIONS_PATH,
    Envelope,
    EnvelopeError,
    Outcome,
    parse_envelope,
)
from mercato.providers.schemas import CheckStatus, CheckVerdict, DispatchTarget


class Answer(Protocol):
    """What a check reads from `mercato.dispatch.client.RawAnswer`."""

    @property
    def status(self) -> int | None: ...

    @property
    def body(self) -> bytes | None: ...

    @property
    def error(self) -> str | None: ...

    @property
    def elapsed_ms(self) -> float: ...


class Probe(Protocol):
    """The slice of `ProviderClient` the checks use (kept structural: no import of dispatch)."""

    def send(
        self,
        target: DispatchTarget,
        method: str,
        path: str,
        *,
        credential: str | None,
        body: bytes | None = None,
        idempotency_key: str | None = None,
        max_bytes: int,
        timeout: float | None = None,
    ) -> Answer: ...


@dataclass(frozen=True, slots=True)
class Observation:
    """One answer as the checks judge it."""

    status: int | None
    error: str | None
    envelope: Envelope | None
    invalid_reason: str | None
    raw_outcome: str | None
    latency_ms: float

    @property
    def works(self) -> bool:
        """True for a valid SUCCEEDED or DEFINED_FAILURE envelope ("execution works")."""
        return self.envelope is not None and self.envelope.outcome in (
            Outcome.SUCCEEDED,
            Outcome.DEFINED_FAILURE,
        )

    def evidence(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"status": self.status, "latencyMs": self.latency_ms}
        if self.envelope is not None:
            detail["outcome"] = self.envelope.outcome.value
            if self.envelope.http_status is not None:
                detail["httpStatus"] = self.envelope.http_status
            if self.envelope.error_code is not None:
                detail["errorCode"] = self.envelope.error_code
        elif self.raw_outcome in set(Outcome):
            detail["outcome"] = self.raw_outcome
        if self.error is not None:
            detail["error"] = self.error
        elif self.invalid_reason is not None:
            detail["envelopeError"] = self.invalid_reason
        return detail


def observe(answer: Answer) -> Observation:
    """Decode and validate an answer as an envelope (spec 2.4 with the spec 3.1 status table)."""
    status, error = answer.status, answer.error
    latency = round(answer.elapsed_ms, 1)
    if error is not None or status is None:
        return Observation(status, error or "no_status", None, None, None, latency)
    try:
        decoded = orjson.loads(answer.body or b"")
    except orjson.JSONDecodeError:
        return Observation(status, None, None, "body is not JSON", None, latency)
    raw = decoded.get("outcome") if isinstance(decoded, dict) else None
    raw_outcome = raw if isinstance(raw, str) else None
    try:
        envelope = parse_envelope(decoded, status)
    except (EnvelopeError, TypeError, ValueError) as exc:
        return Observation(status, None, None, str(exc)[:200], raw_outcome, latency)
    return Observation(status, None, envelope, None, raw_outcome, latency)


def new_key() -> str:
    return CONFORMANCE_KEY_PREFIX + secrets.token_urlsafe(18)


def meaningless_payload() -> bytes:
    return orjson.dumps({"platformConformanceProbe": secrets.token_urlsafe(12)})


@dataclass
class CheckRun:
    """The state one run of the nine checks shares: target, keys, payloads, first answer."""

    probe: Probe
    target: DispatchTarget
    max_bytes: int
    timeout: float | None
    key: str
    payload: bytes
    other_payload: bytes
    first: Observation | None = None

    def call(
        self,
        method: str,
        path: str,
        *,
        credential: str | None,
        body: bytes | None = None,
        idempotency_key: str | None = None,
    ) -> Observation:
        return observe(
            self.probe.send(
                self.target,
                method,
                path,
                credential=credential,
                body=body,
                idempotency_key=idempotency_key,
                max_bytes=self.max_bytes,
                timeout=self.timeout,
            )
        )

    def execute(self, *, key: str, body: bytes, credential: str | None) -> Observation:
        return self.call(
            "POST", EXECUTIONS_PATH, credential=credential, body=body, idempotency_key=key
        )

    def reconcile(self, key: str) -> Observation:
        body = orjson.dumps({"providerIdempotencyKey": key})
        return self.call("POST", RECONCILIATIONS_PATH, credential=self.target.credential, body=body)


def _wrap(payload: bytes) -> bytes:
    return b'{"payload":' + payload + b"}"


def _verdict(position: int, name: str, ok: bool, detail: dict[str, Any]) -> CheckVerdict:
    status: CheckStatus = "passed" if ok else "failed"
    return CheckVerdict(position, name, status, detail)


def _skipped(position: int, name: str) -> CheckVerdict:
    return CheckVerdict(
        position, name, "skipped", {"reason": "the execution endpoint did not work"}
    )


def _is_2xx(obs: Observation) -> bool:
    return obs.error is None and obs.status is not None and 200 <= obs.status < 300


def check_liveness(run: CheckRun) -> CheckVerdict:
    """1. `/health/live` answers 2xx without a credential."""
    obs = run.call("GET", HEALTH_LIVE_PATH, credential=None)
    return _verdict(1, "liveness", _is_2xx(obs), _status_evidence(obs))


def check_readiness(run: CheckRun) -> CheckVerdict:
    """2. `/health/ready` answers 2xx without a credential."""
    obs = run.call("GET", HEALTH_READY_PATH, credential=None)
    return _verdict(2, "readiness", _is_2xx(obs), _status_evidence(obs))


def check_requires_credential(run: CheckRun) -> CheckVerdict:
    """3. Executions are refused with 401 both without and with a wrong credential."""
    wrong = "platform-conformance-invalid-" + secrets.token_urlsafe(18)
    without = run.execute(key=new_key(), body=_wrap(run.payload), credential=None)
    with_wrong = run.execute(key=new_key(), body=_wrap(run.payload), credential=wrong)
    ok = without.status == 401 and with_wrong.status == 401
    detail = {
        "expectedStatus": 401,
        "probeWithoutCredential": _status_evidence(without),
        "probeWithInvalidCredential": _status_evidence(with_wrong),
        "summary": _credential_summary(without, with_wrong),
    }
    return _verdict(3, "execution_requires_credential", ok, detail)


def _credential_summary(without: Observation, with_wrong: Observation) -> str:
    """What check 3 did and saw: the platform itself sent a call without a credential and one
    with a credential it made up, to see the provider refuse both with 401."""
    if without.status == 401 and with_wrong.status == 401:
        return (
            "The platform sent an execution without a credential and one with a deliberately "
            "invalid credential; the provider refused both with 401, as required."
        )
    accepted = [
        f"{label} (answered {obs.status if obs.status is not None else obs.error})"
        for label, obs in (
            ("the probe without a credential", without),
            ("the probe with a deliberately invalid credential", with_wrong),
        )
        if obs.status != 401
    ]
    return (
        "The platform's probes check that the provider refuses executions it cannot "
        "authenticate with 401; it did not refuse " + " and ".join(accepted) + "."
    )


def _status_evidence(obs: Observation) -> dict[str, Any]:
    detail: dict[str, Any] = {"status": obs.status, "latencyMs": obs.latency_ms}
    if obs.error is not None:
        detail["error"] = obs.error
    return detail


def check_envelope_valid(run: CheckRun) -> CheckVerdict:
    """4. The real call answers one of the four outcomes with its required status."""
    obs = run.execute(key=run.key, body=_wrap(run.payload), credential=run.target.credential)
    run.first = obs
    detail = obs.evidence() | {"executionWorks": obs.works}
    return _verdict(4, "execution_envelope_valid", obs.envelope is not None, detail)


def _same_answer(a: Envelope, b: Envelope) -> bool:
    return (
        a.outcome == b.outcome
        and a.result == b.result
        and a.error_code == b.error_code
        and a.correlation_id == b.correlation_id
    )


def check_replay_stable(run: CheckRun) -> CheckVerdict:
    """5. Same key and payload: same outcome, result, errorCode and correlationId."""
    if run.first is None or not run.first.works or run.first.envelope is None:
        return _skipped(5, "replay_is_stable")
    obs = run.execute(key=run.key, body=_wrap(run.payload), credential=run.target.credential)
    ok = obs.envelope is not None and _same_answer(run.first.envelope, obs.envelope)
    detail = obs.evidence()
    if not ok and obs.envelope is not None:
        detail["reason"] = "the replay differs from the first answer"
    return _verdict(5, "replay_is_stable", ok, detail)


def check_fingerprint_conflict(run: CheckRun) -> CheckVerdict:
    """6. Same key, other payload: HTTP 409 with DEFINED_FAILURE and httpStatus 409."""
    if run.first is None or not run.first.works:
        return _skipped(6, "fingerprint_conflict")
    obs = run.execute(key=run.key, body=_wrap(run.other_payload), credential=run.target.credential)
    env = obs.envelope
    ok = (
        obs.status == 409
        and env is not None
        and env.outcome is Outcome.DEFINED_FAILURE
        and env.http_status == 409
    )
    return _verdict(6, "fingerprint_conflict", ok, obs.evidence())


def check_unknown_field_rejected(run: CheckRun) -> CheckVerdict:
    """7. A top-level member beside `payload` is rejected with 400."""
    body = orjson.dumps(
        {
            "payload": orjson.loads(run.payload),
            "platformConformanceUnknownField": secrets.token_urlsafe(6),
        }
    )
    obs = run.execute(key=new_key(), body=body, credential=run.target.credential)
    return _verdict(7, "unknown_envelope_field_rejected", obs.status == 400, _status_evidence(obs))


def check_known_key_reconciles(run: CheckRun) -> CheckVerdict:
    """8. Reconciling the key just accepted returns its stored outcome, never RETRYABLE."""
    first = run.first
    if first is None or not first.works or first.envelope is None:
        return _skipped(8, "known_key_reconciles")
    obs = run.reconcile(run.key)
    env = obs.envelope
    ok = (
        env is not None
        and env.outcome is not Outcome.RETRYABLE_BEFORE_ACCEPT
        and env.outcome == first.envelope.outcome
        and env.correlation_id == first.envelope.correlation_id
    )
    detail = obs.evidence() | {"expectedOutcome": first.envelope.outcome.value}
    return _verdict(8, "known_key_reconciles", ok, detail)


def check_unknown_key_not_success(run: CheckRun) -> CheckVerdict:
    """9. Reconciling a never-submitted key answers anything but SUCCEEDED."""
    obs = run.reconcile(new_key())
    claims_success = obs.raw_outcome == Outcome.SUCCEEDED.value or (
        obs.envelope is not None and obs.envelope.outcome is Outcome.SUCCEEDED
    )
    # No HTTP answer at all is no evidence of compliance, so it does not pass either.
    ok = obs.error is None and not claims_success
    return _verdict(9, "unknown_key_does_not_claim_success", ok, obs.evidence())


CHECKS: tuple[Callable[[CheckRun], CheckVerdict], ...] = (
    check_liveness,
    check_readiness,
    check_requires_credential,
    check_envelope_valid,
    check_replay_stable,
    check_fingerprint_conflict,
    check_unknown_field_rejected,
    check_known_key_reconciles,
    check_unknown_key_not_success,
)

CHECK_NAMES = (
    "liveness",
    "readiness",
    "execution_requires_credential",
    "execution_envelope_valid",
    "replay_is_stable",
    "fingerprint_conflict",
    "unknown_envelope_field_rejected",
    "known_key_reconciles",
    "unknown_key_does_not_claim_success",
)
