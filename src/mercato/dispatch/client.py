"""`ProviderClient`: the provider calls (`mercato.dispatch.calls`) over the blocking transport.

httpcore's connection pool (`mercato.dispatch.transport.GuardedTransport`), reused across
calls, whose sockets go only to guard-checked addresses; the URL is read as httpx reads it, and
the request head is the one httpx writes. It serves the synchronous paths: the conformance
check, artifact pulls, the CLI. Requests go straight to the pool: no redirects to follow, no auth
flow, no cookie jar (a provider's Set-Cookie is never sent back to anyone).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Final, Protocol

import httpcore
import httpx

from mercato.dispatch import calls
from mercato.dispatch.calls import (
    ACCEPT_HEADERS,
    ArtifactFetchError,
    Call,
    ProviderCalls,
    RawAnswer,
    Stop,
)
from mercato.dispatch.guard import BlockedAddress, Resolver, system_resolver
from mercato.dispatch.transport import GuardedTransport
from mercato.protocol import ARTIFACTS_PATH_PREFIX
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

__all__ = ["ArtifactFetchError", "ProviderClient", "RawAnswer", "Wire"]


class Wire(Protocol):
    """What the client sends a request through: `GuardedTransport`, or a test's stand-in."""

    def handle_request(self, request: httpcore.Request) -> httpcore.Response: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Url:
    url: httpcore.URL
    netloc: bytes
    """The Host header's value: the URL's host (and port, unless the scheme's own)."""


_FIXED_HEAD: Final = [
    *((name.encode(), value.encode()) for name, value in ACCEPT_HEADERS.items()),
    (b"Connection", b"keep-alive"),
    (b"User-Agent", f"python-httpx/{httpx.__version__}".encode()),
]
"""After Host, on every request (what httpx.Client sent with Mercato's two defaults)."""
_TIMEOUTS = ("connect", "read", "write", "pool")
"""httpcore's timeouts, each the call's (what `httpx.Timeout(seconds)` sets)."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_READ_ERRORS = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)
_SEND_FAILURES: Final[calls.Failures] = (
    (BlockedAddress, calls.ERROR_BLOCKED),
    (httpcore.TimeoutException, calls.ERROR_TIMEOUT),
    ((httpcore.ConnectError, httpcore.UnsupportedProtocol), calls.ERROR_CONNECT),
    (_READ_ERRORS, calls.ERROR_READ),
)
_READ_FAILURES: Final[calls.Failures] = (
    (httpcore.TimeoutException, calls.ERROR_TIMEOUT),
    (_READ_ERRORS, calls.ERROR_READ),
)


class ProviderClient(ProviderCalls[RawAnswer, _Url]):
    """Calls provider endpoints, blocking; build one per process and reuse it (it pools
    connections). `transport` replaces the guarded pool (a test's); `resolver` its lookup."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: Wire | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        super().__init__(settings)
        if transport is None:
            transport = GuardedTransport(
                allow_private=self._allow_private, resolver=resolver or system_resolver
            )
        self._wire = transport

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def fetch_artifact(self, target: DispatchTarget, digest: str, *, max_bytes: int) -> bytes:
        """Fetch `GET /v1/artifacts/{digest}` whole and return it only if its SHA-256 matches."""
        path = ARTIFACTS_PATH_PREFIX + digest
        answer = self.get(target, path, with_credential=True, max_bytes=max_bytes)
        return calls.verify_artifact(answer, digest)

    def _parse(self, url: str) -> tuple[_Url, str | None]:
        try:
            parsed = httpx.URL(url)
            host = parsed.raw_host.decode("ascii")
        except httpx.InvalidURL as exc:
            raise ValueError(url) from exc
        pinned = httpcore.URL(
            scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
        )
        return _Url(pinned, parsed.netloc), host or None

    def _refused(self, answer: RawAnswer) -> RawAnswer:
        return answer

    def _exchange(self, call: Call[_Url]) -> RawAnswer:
        request = httpcore.Request(
            call.method,
            call.url.url,
            headers=_head(call.url.netloc, call.method, call.headers, call.data),
            content=call.data,
            extensions={"timeout": dict.fromkeys(_TIMEOUTS, call.timeout)},
        )
        try:
            response = self._wire.handle_request(request)
        except (BlockedAddress, httpcore.TimeoutException, *_READ_ERRORS) as exc:
            return self._answered(call, None, None, calls.failure(exc, _SEND_FAILURES))
        try:
            content = _read(response, call)
        except Stop as stop:
            return self._answered(call, response.status, None, stop.error)
        finally:
            response.close()
        return self._answered(call, response.status, content, None)


def _head(
    netloc: bytes, method: str, headers: dict[str, str], body: bytes | None
) -> list[tuple[bytes, bytes]]:
    """The request head, every header in httpx.Request's order: Host, an empty POST's
    Content-Length, the fixed headers, the call's own, then a body's Content-Length."""
    head = [(b"Host", netloc)]
    if not body and method in _BODY_METHODS:
        head.append((b"Content-Length", b"0"))
    head += _FIXED_HEAD
    head += [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]
    if body:
        head.append((b"Content-Length", str(len(body)).encode("ascii")))
    return head


def _read(response: httpcore.Response, body: Call[_Url]) -> bytes:
    """Read the raw body into `body` (raises Stop past its cap or its deadline)."""
    for name, value in response.headers:
        if name.lower() == b"content-length":
            body.start(value.decode("latin-1"))
    try:
        for chunk in response.iter_stream():
            body.add(chunk)
    except (httpcore.TimeoutException, *_READ_ERRORS) as exc:
        raise Stop(calls.failure(exc, _READ_FAILURES)) from exc
    return body.content()
