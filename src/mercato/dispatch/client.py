"""`ProviderClient`: the one way the platform talks to a provider (spec 4.2, DESIGN.md §7).

Synchronous httpx over a pooled client that is reused across calls. Never follows redirects,
stops reading at `max_bytes`, bounds every call by a deadline, and turns every transport failure
into a `RawAnswer.error` string instead of an exception. The credential goes only into the
`Authorization` header: it is never logged, never returned and never part of an error.
"""

from __future__ import annotations

import hashlib
import time
from types import TracebackType

import httpx
import orjson

from mercato.dispatch.guard import BlockedAddress, Resolver, check_base_url, system_resolver
from mercato.dispatch.transport import (
    ERROR_BLOCKED,
    ERROR_CONNECT,
    ERROR_READ,
    ERROR_REDIRECT,
    ERROR_TIMEOUT,
    ERROR_TOO_LARGE,
    GuardedTransport,
    RawAnswer,
)
from mercato.protocol import (
    ARTIFACTS_PATH_PREFIX,
    AUTHORIZATION_HEADER,
    EXECUTIONS_PATH,
    IDEMPOTENCY_KEY_HEADER,
    RECONCILIATIONS_PATH,
)
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

__all__ = ["ArtifactFetchError", "ProviderClient", "RawAnswer"]


class ArtifactFetchError(Exception):
    """An artifact could not be fetched whole and verified; `reason` says why (no secrets)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _Stop(Exception):
    def __init__(self, error: str) -> None:
        self.error = error


_HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "identity",
    "Connection": "keep-alive",
    "User-Agent": f"python-httpx/{httpx.__version__}",
}
"""Sent on every provider request (what httpx.Client sent with Mercato's two defaults)."""


class ProviderClient:
    """Calls provider endpoints; build one per process and reuse it (it pools connections)."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.BaseTransport | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self._allow_private = settings.private_addresses_allowed
        self._default_timeout = settings.provider_timeout_seconds
        if transport is None:
            transport = GuardedTransport(
                allow_private=self._allow_private, resolver=resolver or system_resolver
            )
        # Requests go straight to the transport: no redirects to follow, no auth flow, and no
        # cookie jar (a provider's Set-Cookie is never sent back to anyone), so httpx.Client's
        # per-request machinery for those would only cost CPU on every call.
        self._transport = transport

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        """POST /v1/executions; `payload_bytes` is the payload object's JSON, sent wrapped."""
        return self.send(
            target,
            "POST",
            EXECUTIONS_PATH,
            credential=target.credential,
            body=b'{"payload":' + payload_bytes + b"}",
            idempotency_key=idempotency_key,
            max_bytes=response_max_bytes,
            timeout=timeout,
        )

    def reconcile(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        """POST /v1/reconciliations for a key the platform used earlier."""
        return self.send(
            target,
            "POST",
            RECONCILIATIONS_PATH,
            credential=target.credential,
            body=orjson.dumps({"providerIdempotencyKey": idempotency_key}),
            max_bytes=response_max_bytes,
            timeout=timeout,
        )

    def get(
        self,
        target: DispatchTarget,
        path: str,
        *,
        with_credential: bool,
        max_bytes: int,
        timeout: float | None = None,
    ) -> RawAnswer:
        """GET `path` under the connection's base URL."""
        credential = target.credential if with_credential else None
        return self.send(
            target, "GET", path, credential=credential, max_bytes=max_bytes, timeout=timeout
        )

    def fetch_artifact(self, target: DispatchTarget, digest: str, *, max_bytes: int) -> bytes:
        """Fetch `GET /v1/artifacts/{digest}` whole and return it only if its SHA-256 matches."""
        answer = self.get(
            target, ARTIFACTS_PATH_PREFIX + digest, with_credential=True, max_bytes=max_bytes
        )
        if answer.error is not None:
            raise ArtifactFetchError(answer.error)
        if answer.status != 200 or answer.body is None:
            raise ArtifactFetchError(f"status {answer.status}")
        if hashlib.sha256(answer.body).hexdigest() != digest.lower():
            raise ArtifactFetchError("digest_mismatch")
        return answer.body

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
        """Make one request; the lower-level seam the conformance check uses for odd requests."""
        timeout = self._default_timeout if timeout is None else timeout
        started = time.monotonic()
        url = target.base_url.rstrip("/") + path
        # The text, and the host as yarl and httpx read it (the transport checks the host httpx
        # dials again, before its connect): the async client's check, the same function.
        if check_base_url(target.base_url, allow_private=self._allow_private) is not None:
            return RawAnswer(None, None, ERROR_BLOCKED, 0.0)
        headers = dict(_HEADERS)
        if credential is not None:
            headers[AUTHORIZATION_HEADER] = f"Bearer {credential}"
        if idempotency_key is not None:
            headers[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            request = httpx.Request(
                method,
                url,
                content=body,
                headers=headers,
                extensions={"timeout": httpx.Timeout(timeout).as_dict()},
            )
            response = self._transport.handle_request(request)
        except BlockedAddress:
            return RawAnswer(None, None, ERROR_BLOCKED, _ms(started))
        except httpx.TimeoutException:
            return RawAnswer(None, None, ERROR_TIMEOUT, _ms(started))
        except (httpx.ConnectError, httpx.UnsupportedProtocol):
            return RawAnswer(None, None, ERROR_CONNECT, _ms(started))
        except httpx.InvalidURL:
            return RawAnswer(None, None, ERROR_BLOCKED, _ms(started))
        except httpx.TransportError:
            return RawAnswer(None, None, ERROR_READ, _ms(started))
        try:
            content = _read_bounded(response, max_bytes, deadline=started + timeout)
        except _Stop as stop:
            return RawAnswer(response.status_code, None, stop.error, _ms(started))
        finally:
            response.close()
        error = ERROR_REDIRECT if 300 <= response.status_code < 400 else None
        return RawAnswer(response.status_code, content, error, _ms(started))


def _read_bounded(response: httpx.Response, max_bytes: int, *, deadline: float) -> bytes:
    """Read the raw body, stopping past `max_bytes` or `deadline` (raises _Stop)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _Stop(ERROR_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_raw():
            size += len(chunk)
            if size > max_bytes:
                raise _Stop(ERROR_TOO_LARGE)
            chunks.append(chunk)
            # Per-read timeouts alone let a trickling provider run forever; bound the whole call.
            if time.monotonic() > deadline:
                raise _Stop(ERROR_TIMEOUT)
    except httpx.TimeoutException as exc:
        raise _Stop(ERROR_TIMEOUT) from exc
    except httpx.TransportError as exc:
        raise _Stop(ERROR_READ) from exc
    return b"".join(chunks)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000.0, 3)
