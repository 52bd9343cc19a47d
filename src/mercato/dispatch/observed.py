"""The provider clients with a log line and a latency observation per provider call.

The line carries the connection, operation, status or transport error and elapsed time — never
the credential, the payload or the answer — and the request id of the HTTP request it serves
(from the logging contextvar). The decrypted credential is registered with the log redactor
before anything is sent, so that no later line can print it literally. Both transports tell
`LOG_OBSERVER` of every call (`mercato.dispatch.calls.ProviderCalls.observer`).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from mercato.core.logs import log_fields, register_secret
from mercato.core.metrics import PROVIDER_CALL_LATENCY
from mercato.dispatch.async_client import AsyncProviderClient
from mercato.dispatch.calls import CallObserver, RawAnswer
from mercato.dispatch.client import ProviderClient
from mercato.providers.schemas import DispatchTarget

__all__ = ["LOG_OBSERVER", "AsyncObservedProviderClient", "ObservedProviderClient"]

log = logging.getLogger("mercato.dispatch")

_OPERATIONS = {
    "/v1/executions": "execute",
    "/v1/reconciliations": "reconcile",
}


def _operation(method: str, path: str) -> str:
    if path in _OPERATIONS:
        return _OPERATIONS[path]
    if path.startswith("/v1/artifacts/"):
        return "artifact"
    if path.startswith("/health"):
        return "health"
    return method.lower()


def _result(answer: RawAnswer) -> str:
    if answer.error is not None:
        return answer.error
    if answer.status is None:
        return "none"
    return f"{answer.status // 100}xx"


# The latency series of each (operation, result), looked up once: both are finite sets (the
# operations above, a status class or a transport error name).
_latency: dict[tuple[str, str], Any] = {}


def _observe(target: DispatchTarget, method: str, path: str, answer: RawAnswer) -> None:
    operation = _operation(method, path)
    result = _result(answer)
    series = _latency.get((operation, result))
    if series is None:
        series = _latency[operation, result] = PROVIDER_CALL_LATENCY.labels(operation, result)
    series.observe(answer.elapsed_ms / 1000.0)
    # Without the caller lookup `log.info` does (decision 0383): no line carries file or line.
    log_fields(
        log,
        logging.INFO,
        "provider call",
        {
            "connection_id": target.connection_id,
            "operation": operation,
            "path": path if operation != "artifact" else "/v1/artifacts/{digest}",
            "provider_status": answer.status,
            "provider_error": answer.error,
            "elapsed_ms": round(answer.elapsed_ms, 1),
        },
    )


class _LogObserver:
    """Registers each credential with the log redactor; logs and times each answer."""

    sending = staticmethod(register_secret)
    answered = staticmethod(_observe)


LOG_OBSERVER: CallObserver = _LogObserver()


class ObservedProviderClient(ProviderClient):
    """ProviderClient plus a log line and a latency observation per call (same behaviour)."""

    observer: ClassVar[CallObserver | None] = LOG_OBSERVER


class AsyncObservedProviderClient(AsyncProviderClient):
    """AsyncProviderClient plus the same log line and latency observation per call."""

    observer: ClassVar[CallObserver | None] = LOG_OBSERVER
