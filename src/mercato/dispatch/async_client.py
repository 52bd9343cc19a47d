"""`AsyncProviderClient`: the provider calls (`mercato.dispatch.calls`) over aiohttp, awaited.

The event loop's transport (issue 20, decision 0250), chosen by measurement (`python -m
bench.clients`): one long-lived `ClientSession` over one `TCPConnector`, built on the first call
on the loop that makes it and closed with `aclose()`. The connector's resolver is the guard
(`GuardedResolver`): it judges the host as dialled, resolves the name once, refuses the whole
answer when any address is not public, and hands aiohttp only the checked addresses, which is all
aiohttp ever dials (no DNS cache, so every new connection is resolved and checked again). The
URL is read as yarl reads it. No shared pool limit (decision 0514): the connector never makes a
call wait for a connection; how many calls are in flight is bounded before acceptance, per
connection and per process (`mercato.core.bulkhead`), so a slow provider cannot starve another's.
"""

from __future__ import annotations

import math
import socket
import ssl
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Final

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from mercato.dispatch import calls
from mercato.dispatch.calls import (
    ACCEPT_HEADERS,
    KEEPALIVE_SECONDS,
    Call,
    ProviderCalls,
    RawAnswer,
    Stop,
)
from mercato.dispatch.guard import (
    AsyncResolver,
    BlockedAddress,
    Resolver,
    UnresolvableHost,
    resolve_checked_async,
    system_lookup,
)
from mercato.protocol import ARTIFACTS_PATH_PREFIX
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

__all__ = [
    "KEEPALIVE_SECONDS",
    "SESSION_HEADERS",
    "AsyncProviderClient",
    "AsyncResolver",
    "GuardedResolver",
]

SESSION_HEADERS: Final = {
    **ACCEPT_HEADERS,
    "User-Agent": f"mercato (aiohttp/{aiohttp.__version__})",
}
"""The session's own headers, sent first on every call (decision 0445): a call adds only its
own, so aiohttp merges three headers instead of six."""
_SEND_FAILURES: Final[calls.Failures] = (
    (BlockedAddress, calls.ERROR_BLOCKED),
    (TimeoutError, calls.ERROR_TIMEOUT),
    # before ValueError: a certificate error is both (ssl.CertificateError is one)
    ((UnresolvableHost, aiohttp.ClientConnectorError), calls.ERROR_CONNECT),
    ((aiohttp.InvalidURL, ValueError), calls.ERROR_BLOCKED),
    ((aiohttp.ClientError, OSError), calls.ERROR_READ),
)
_SENT_ERRORS = (
    BlockedAddress,
    TimeoutError,
    UnresolvableHost,
    ValueError,
    aiohttp.ClientError,
    OSError,
)
_READ_FAILURES: Final[calls.Failures] = (
    (TimeoutError, calls.ERROR_TIMEOUT),
    ((aiohttp.ClientError, OSError), calls.ERROR_READ),
)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver seam as the SSRF guard: resolve once, check all, return only those.

    `lookup` may be awaited (the default, the loop's getaddrinfo) or plain (a test's, or the sync
    client's `Resolver`, so both clients can be driven by the same injected answers).
    """

    def __init__(self, *, allow_private: bool, lookup: AsyncResolver | Resolver | None = None):
        self._allow_private = allow_private
        self._lookup = lookup or system_lookup

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await resolve_checked_async(
            host, port, resolver=self._lookup, allow_private=self._allow_private
        )
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


class AsyncProviderClient(ProviderCalls[Coroutine[Any, Any, RawAnswer], URL]):
    """Calls provider endpoints from the event loop; build one per process and reuse it.

    The session is opened on the first call, on the loop that makes it (aiohttp binds a session
    to one loop), and every later call reuses it and its pooled connections. `resolver` replaces
    the guard's lookup (a test's answers); `ssl_context` the system's trust store.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: AsyncResolver | Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(settings)
        self._resolver = GuardedResolver(allow_private=self._allow_private, lookup=resolver)
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the provider client is closed")
        connector = aiohttp.TCPConnector(
            resolver=self._resolver,
            use_dns_cache=False,
            # No pool limit, in all or per host (decision 0514): the bulkheads bound the calls
            # in flight before they are accepted, so a call never queues for a connection
            # another provider holds, and its timeout never runs while it waits for one.
            limit=0,
            limit_per_host=0,
            keepalive_timeout=KEEPALIVE_SECONDS,
            ssl=self._ssl,  # True: the system's trust store, host names verified
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=SESSION_HEADERS,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,
            raise_for_status=False,
        )
        return self._session

    async def aclose(self) -> None:
        """Close the pooled connections; the client cannot be used afterwards."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AsyncProviderClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def fetch_artifact(self, target: DispatchTarget, digest: str, *, max_bytes: int) -> bytes:
        """Fetch `GET /v1/artifacts/{digest}` whole and return it only if its SHA-256 matches."""
        path = ARTIFACTS_PATH_PREFIX + digest
        answer = await self.get(target, path, with_credential=True, max_bytes=max_bytes)
        return calls.verify_artifact(answer, digest)

    def _parse(self, url: str) -> tuple[URL, str | None]:
        parsed = URL(url)
        return parsed, parsed.raw_host

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        found = self._timeouts.get(seconds)
        if found is None:
            # One deadline for the whole call, exact (no rounding up to a whole second): it
            # bounds the connect and every read too, as nothing of a call starts before it.
            found = aiohttp.ClientTimeout(total=seconds, ceil_threshold=math.inf)
            if len(self._timeouts) >= 64:
                self._timeouts.clear()
            self._timeouts[seconds] = found
        return found

    async def _refused(self, answer: RawAnswer) -> RawAnswer:
        return answer

    async def _exchange(self, call: Call[URL]) -> RawAnswer:
        session = self._session or self._open()
        try:
            response = await session.request(
                call.method,
                call.url,
                data=call.data,
                headers=call.headers,
                allow_redirects=False,
                timeout=self._timeout(call.timeout),
            )
        except _SENT_ERRORS as exc:
            return self._answered(call, None, None, calls.failure(exc, _SEND_FAILURES))
        try:
            content = await _read(response, call)
        except Stop as stop:
            response.close()  # drop the connection: its body was not read to the end
            return self._answered(call, response.status, None, stop.error)
        except BaseException:  # cancelled mid-body: never hand a half-read socket back
            response.close()
            raise
        response.release()
        return self._answered(call, response.status, content, None)


async def _read(response: aiohttp.ClientResponse, body: Call[URL]) -> bytes:
    """Read the raw body into `body` (raises Stop past its cap or its deadline)."""
    body.start(response.headers.get("Content-Length"))
    content = response.content
    try:
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            body.add(chunk)
            if content.at_eof():  # the whole body is in: no further read to learn it
                break
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise Stop(calls.failure(exc, _READ_FAILURES)) from exc
    return body.content()
