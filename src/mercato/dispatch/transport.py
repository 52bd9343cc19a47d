"""The outbound transport: an httpx transport whose sockets go only to guard-checked addresses."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import httpcore
import httpx

from mercato.dispatch.guard import (
    BlockedAddress,
    Resolver,
    UnresolvableHost,
    dialled_host_reason,
    resolve_checked,
    system_resolver,
)

# RawAnswer.error values.
ERROR_TIMEOUT = "timeout"
ERROR_CONNECT = "connect"
ERROR_READ = "read"
ERROR_TOO_LARGE = "too_large"
ERROR_REDIRECT = "redirect"
ERROR_BLOCKED = "blocked_address"
KEEPALIVE_SECONDS: Final = 4.0
"""How long an idle pooled connection is kept for another call, by both provider clients (this
sync one and `async_client`'s): under the 5 s after which uvicorn (the provider SDK's server,
and FastAPI's usual one), Node and Apache close an idle keep-alive connection. Kept for 5 s as
well, a connection idle for just under 5 s by the pool's clock was reused as the provider's own
timer closed it, the call reset unanswered: on the invoke path an unknown outcome, answered 202
and left for reconciliation, though the provider never saw the call (decision 0500). The pool
drops it first, so such a race needs the process to stall for a second between taking the
connection and writing the call."""


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """What came back from one provider call; `error` is set when there is no usable answer.

    With `redirect` the 3xx status and its (bounded) body are kept; with `too_large` the status is
    kept and the body dropped. Never carries request headers, so never the credential.
    """

    status: int | None
    body: bytes | None
    error: str | None
    elapsed_ms: float


class GuardedNetworkBackend(httpcore.NetworkBackend):
    """Resolve the origin host once, check every address, and connect only to those addresses.

    The TLS layer above still gets the original host name for SNI and certificate checks, and the
    Host header is untouched: only the socket's destination is pinned.
    """

    def __init__(
        self,
        *,
        resolver: Resolver = system_resolver,
        allow_private: bool,
        inner: httpcore.NetworkBackend | None = None,
    ) -> None:
        self._resolver = resolver
        self._allow_private = allow_private
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        reason = dialled_host_reason(host, allow_private=self._allow_private)
        if reason is not None:  # the host as httpx dials it: no lookup, no socket
            raise BlockedAddress(reason)
        try:
            addresses = resolve_checked(
                host, port, resolver=self._resolver, allow_private=self._allow_private
            )
        except UnresolvableHost as exc:
            raise httpcore.ConnectError("host did not resolve") from exc
        last: Exception | None = None
        for address in addresses:
            try:
                return self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not provider destinations")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The system's trust store, host names verified: built once per process and shared by
    every client (loading the trust store costs tens of milliseconds; a context is safe to
    share between threads and connections once it is configured)."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport with its connection pool rebuilt over the guarded backend."""

    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver = system_resolver,
        inner: httpcore.NetworkBackend | None = None,
        limits: httpx.Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # Every connection may stay open for reuse: a process makes up to one provider call per
        # request thread at once, and a connection closed after each call would be opened again
        # (socket, resolution, address checks) for the next.
        limits = limits or httpx.Limits(
            max_connections=100, max_keepalive_connections=100, keepalive_expiry=KEEPALIVE_SECONDS
        )
        ssl_context = ssl_context or default_ssl_context()
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        # httpx 0.28 builds `_pool` in __init__ with no way to pass a network backend; replace it
        # with an identical pool over the guarded backend (pinned by the httpx<1 constraint).
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=GuardedNetworkBackend(
                resolver=resolver, allow_private=allow_private, inner=inner
            ),
        )
