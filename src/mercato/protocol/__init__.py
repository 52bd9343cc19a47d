"""The provider wire contract (spec 2.3–2.5, 3.1, 4.2), shared by the platform and the SDK."""

from mercato.protocol.envelope import (
    ERROR_CODE_MAX_LENGTH,
    Envelope,
    EnvelopeError,
    Outcome,
    parse_envelope,
    status_matches,
)
from mercato.protocol.wire import (
    ARTIFACTS_PATH_PREFIX,
    AUTHORIZATION_HEADER,
    CONFORMANCE_KEY_PREFIX,
    EXECUTIONS_PATH,
    HEALTH_LIVE_PATH,
    HEALTH_READY_PATH,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    RECONCILIATIONS_PATH,
    ExecutionRequestError,
    parse_execution_request,
    parse_reconciliation_request,
)

__all__ = [
    "ARTIFACTS_PATH_PREFIX",
    "AUTHORIZATION_HEADER",
    "CONFORMANCE_KEY_PREFIX",
    "ERROR_CODE_MAX_LENGTH",
    "EXECUTIONS_PATH",
    "HEALTH_LIVE_PATH",
    "HEALTH_READY_PATH",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENCY_KEY_MAX_LENGTH",
    "RECONCILIATIONS_PATH",
    "Envelope",
    "EnvelopeError",
    "ExecutionRequestError",
    "Outcome",
    "parse_envelope",
    "parse_execution_request",
    "parse_reconciliation_request",
    "status_matches",
]
