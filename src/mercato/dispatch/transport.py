"""The blocking transport's network layer: httpcore's connection pool over a network backend
whose sockets go only to guard-checked addresses (`mercato.dispatch.guard`)."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from mercato.dispatch.calls import KEEPALIVE_SECONDS
from mercato.dispatch.guard import Resolver, UnresolvableHost, resolve_checked, system_resolver

__all__ = ["GuardedNetworkBackend", "GuardedTransport", "default_ssl_context"]


class GuardedNetworkBackend(httpcore.NetworkBackend):
    """Judge the host as dialled, resolve it once, check every address, and connect only to those
    addresses.

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
        try:  # raises BlockedAddress (no lookup, no socket) for a refused host or address
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


class GuardedTransport(httpcore.ConnectionPool):
    """The blocking client's connection pool: HTTP/1.1 over the guarded backend.

    Every connection may stay open for reuse: a process makes up to one provider call per request
    thread at once, and a connection closed after each call would be opened again (socket,
    resolution, address checks) for the next.
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver = system_resolver,
        inner: httpcore.NetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(
            ssl_context=ssl_context or default_ssl_context(),
            max_connections=100,
            max_keepalive_connections=100,
            keepalive_expiry=KEEPALIVE_SECONDS,
            http1=True,
            http2=False,
            network_backend=GuardedNetworkBackend(
                resolver=resolver, allow_private=allow_private, inner=inner
            ),
        )
