"""The simulation's async provider client: what `runtime.async_provider_client()` returns.

It makes the requests the production clients make (the same paths, headers and wrapped payload)
and reads the simulated provider's answer into the same `RawAnswer` the production clients
return, with the same error names, so `mercato.dispatch.outcomes.classify` judges it exactly as
it judges a real provider's. The request is handed to `SimProvider.ahandle` on the event loop:
the interleaving planned for a call in flight is awaited there, in order, so one seed always
gives one schedule. No wall-clock deadline (the production clients' whole-call bound) applies:
time is the fake clock's, and a read cut off by real time would make a run depend on the machine.
"""

from __future__ import annotations

import math

import httpx
import orjson

from mercato.dispatch.calls import (
    ERROR_CONNECT,
    ERROR_READ,
    ERROR_REDIRECT,
    ERROR_TIMEOUT,
    Body,
    RawAnswer,
    Stop,
)
from mercato.protocol import (
    AUTHORIZATION_HEADER,
    EXECUTIONS_PATH,
    IDEMPOTENCY_KEY_HEADER,
    RECONCILIATIONS_PATH,
)
from mercato.providers.schemas import DispatchTarget
from support.simulation.provider import SimProvider

_HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "identity",
    "Content-Type": "application/json",
}


class SimProviderClient:
    """Implements the async provider client's calls over the simulated provider."""

    def __init__(self, provider: SimProvider) -> None:
        self._provider = provider

    async def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        body = b'{"payload":' + payload_bytes + b"}"
        max_bytes = response_max_bytes
        key = idempotency_key
        return await self._send(target, EXECUTIONS_PATH, body, max_bytes=max_bytes, key=key)

    async def reconcile(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        body = orjson.dumps({"providerIdempotencyKey": idempotency_key})
        return await self._send(target, RECONCILIATIONS_PATH, body, max_bytes=response_max_bytes)

    async def aclose(self) -> None:
        return None

    async def _send(
        self,
        target: DispatchTarget,
        path: str,
        body: bytes,
        *,
        max_bytes: int,
        key: str | None = None,
    ) -> RawAnswer:
        headers = {**_HEADERS, AUTHORIZATION_HEADER: f"Bearer {target.credential}"}
        if key is not None:
            headers[IDEMPOTENCY_KEY_HEADER] = key
        request = httpx.Request(
            "POST", target.base_url.rstrip("/") + path, content=body, headers=headers
        )
        try:
            response = await self._provider.ahandle(request)
        except httpx.TimeoutException:
            return RawAnswer(None, None, ERROR_TIMEOUT, 0.0)
        except httpx.ConnectError:
            return RawAnswer(None, None, ERROR_CONNECT, 0.0)
        except httpx.TransportError:
            return RawAnswer(None, None, ERROR_READ, 0.0)
        try:
            # The product client's bounded read; no wall-clock deadline here, so a trace never
            # depends on how busy the machine is (decision 0350).
            content = _read(response, max_bytes)
        except Stop as stop:
            return RawAnswer(response.status_code, None, stop.error, 0.0)
        finally:
            response.close()
        error = ERROR_REDIRECT if 300 <= response.status_code < 400 else None
        return RawAnswer(response.status_code, content, error, 0.0)


def _read(response: httpx.Response, max_bytes: int) -> bytes:
    """The product clients' bounded read (`Body`), over the simulated answer."""
    body = Body(max_bytes, math.inf)
    body.start(response.headers.get("content-length"))
    try:
        for chunk in response.iter_raw():
            body.add(chunk)
    except httpx.TimeoutException as exc:
        raise Stop(ERROR_TIMEOUT) from exc
    except httpx.TransportError as exc:
        raise Stop(ERROR_READ) from exc
    return body.content()
