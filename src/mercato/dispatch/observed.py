"""A ProviderClient that logs one line per provider call and observes its latency.

The line carries the connection, operation, status or transport error and elapsed time — never
the credential, the payload or the answer — and the request id of the HTTP request it serves
(from the logging contextvar). The decrypted credential is registered with the log redactor so
that no later line can print it literally.
"""

from __future__ import annotations

import logging
from typing import Any

from mercato.core.logs import log_fields, register_secret
from mercato.core.metrics import PROVIDER_CALL_LATENCY
from mercato.dispatch.async_client import AsyncProviderClient
from mercato.dispatch.client import ProviderClient
from mercato.dispatch.transport import RawAnswer
from mercato.providers.schemas import DispatchTarget

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


class ObservedProviderClient(ProviderClient):
    """ProviderClient plus a log line and a latency observation per call (same behaviour)."""

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
    ) -> RawAnswer:
        register_secret(credential)
        answer = super().send(
            target,
            method,
            path,
            credential=credential,
            body=body,
            idempotency_key=idempotency_key,
            max_bytes=max_bytes,
            timeout=timeout,
        )
        _observe(target, method, path, answer)
        return answer


class AsyncObservedProviderClient(AsyncProviderClient):
    """AsyncProviderClient plus the same log line and latency observation per call."""

    async def send(
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
    ) -> RawAnswer:
        register_secret(credential)
        answer = await super().send(
            target,
            method,
            path,
            credential=credential,
            body=body,
            idempotency_key=idempotency_key,
            max_bytes=max_bytes,
            timeout=timeout,
        )
        _observe(target, method, path, answer)
        return answer


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
