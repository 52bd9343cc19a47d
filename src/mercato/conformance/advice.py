"""What to fix when a conformance check fails: one line per check, for people reading a report."""

from __future__ import annotations

FIXES = {
    "liveness": "Serve GET /health/live with a 2xx status and no credential required.",
    "readiness": (
        "Serve GET /health/ready with a 2xx status and no credential when the service can take "
        "work (its idempotency store reachable)."
    ),
    "execution_requires_credential": (
        "Answer 401 to POST /v1/executions without an Authorization header and with any bearer "
        "credential other than the connection's (compare in constant time)."
    ),
    "execution_envelope_valid": (
        "Answer POST /v1/executions with a spec 2.4 envelope whose outcome matches the HTTP "
        "status (SUCCEEDED 2xx, DEFINED_FAILURE 4xx/5xx equal to httpStatus, "
        "RETRYABLE_BEFORE_ACCEPT 503, UNKNOWN_OUTCOME 202). A payload that means nothing to you "
        "is a DEFINED_FAILURE such as 400 INVALID_PAYLOAD."
    ),
    "replay_is_stable": (
        "Store the first answer for an Idempotency-Key and replay it for the same key and "
        "payload: same outcome, result, errorCode and correlationId."
    ),
    "fingerprint_conflict": (
        "Answer the same Idempotency-Key with another payload with HTTP 409, outcome "
        "DEFINED_FAILURE and httpStatus 409, leaving the stored answer untouched."
    ),
    "unknown_envelope_field_rejected": (
        "Refuse an execution body with any member beside `payload` with HTTP 400."
    ),
    "known_key_reconciles": (
        "Answer POST /v1/reconciliations for an accepted key with its stored outcome and "
        "correlationId (never RETRYABLE_BEFORE_ACCEPT for a key you accepted)."
    ),
    "unknown_key_does_not_claim_success": (
        "Answer POST /v1/reconciliations for a key you never saw with RETRYABLE_BEFORE_ACCEPT "
        "(503), never SUCCEEDED."
    ),
}
SKIPPED = "Skipped because the execution endpoint did not work: fix that check first."


def fix_for(name: str, status: str) -> str | None:
    """The advice for a check that did not pass (None when it passed)."""
    if status == "passed":
        return None
    if status == "skipped":
        return SKIPPED
    return FIXES.get(name, "See spec part 4.2 for what this endpoint must answer.")
