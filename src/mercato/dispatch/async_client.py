"""`AsyncProviderClient`: the provider client for the event loop (issue 20, decision 0250).

The same calls, answers and guard as `mercato.dispatch.client.ProviderClient`, awaited instead of
blocking a thread. aiohttp was chosen by measurement (`python -m bench.clients`): one long-lived
`ClientSession` over one `TCPConnector`, built once per process on its event loop and closed with
`aclose()`. Every rule of the synchronous client holds:

- **Resolved-address SSRF check, one resolution.** The connector's resolver is the guard: it
  resolves the name once, refuses the whole answer when any address is not public, and hands
  aiohttp only the checked addresses, which is all aiohttp ever dials (no DNS cache, so every
  new connection is resolved and checked again; the TLS layer still gets the original name for
  SNI and the certificate). aiohttp dials an IP-literal host without asking any resolver, so a
  base URL's literal host is judged before the request: the text (`check_base_url`) and the
  host as yarl will dial it (`dialled_host_reason`, the sync transport's check too), so a
  spelling yarl folds to an address (full-width digits, `。`) is refused, never dialled.
- **No redirects**: a 3xx comes back as it is, with `error="redirect"`.
- **Timeouts**: connect, each read, and the whole call (including the body) are bounded by the
  call's timeout; the body loop also checks the deadline between reads, as the sync client does.
- **No shared pool limit** (decision 0514): the connector never makes a call wait for a
  connection; how many calls are in flight is bounded before acceptance, per connection and
  per process (`mercato.core.bulkhead`), so a slow provider cannot starve another's calls.
- **The response byte cap**: a declared `Content-Length` over the cap is refused before reading;
  otherwise reading stops as soon as the bytes read pass the cap, and the connection is dropped.
- **Errors are answers**: every transport failure becomes `RawAnswer.error` with the same names
  the sync client uses, so `mercato.dispatch.outcomes.classify` reads both alike.

No cookie jar (a provider's `Set-Cookie` is never sent back), no decompression (`Accept-Encoding:
identity`, raw bytes, as the sync client reads them), no environment proxies. The credential goes
only into the `Authorization` header.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Final

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from mercato.dispatch.client import ArtifactFetchError
from mercato.dispatch.guard import (
    BlockedAddress,
    Resolver,
    UnresolvableHost,
    check_answers,
    check_base_url,
    dialled_host_reason,
)
from mercato.dispatch.transport import (
    ERROR_BLOCKED,
    ERROR_CONNECT,
    ERROR_READ,
    ERROR_REDIRECT,
    ERROR_TIMEOUT,
    ERROR_TOO_LARGE,
    KEEPALIVE_SECONDS,
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

__all__ = ["KEEPALIVE_SECONDS", "AsyncProviderClient", "AsyncResolver", "GuardedResolver"]

AsyncResolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""An awaited name lookup: every A and AAAA address of (host, port), in order."""

_HEADERS: Final = {
    "Accept": "application/json",
    "Accept-Encoding": "identity",
    "User-Agent": f"mercato (aiohttp/{aiohttp.__version__})",
}
_MAX_CACHED_URLS = 4096


async def system_lookup(host: str, port: int) -> list[str]:
    """The event loop's `getaddrinfo` (a worker thread), every address once, in order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


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
        reason = dialled_host_reason(host, allow_private=self._allow_private)
        if reason is not None:
            raise BlockedAddress(reason)
        try:
            found = self._lookup(host, port)
            answers = await found if isinstance(found, Awaitable) else found
        except OSError as exc:
            raise UnresolvableHost(host) from exc
        addresses = check_answers(host, list(answers), allow_private=self._allow_private)
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


class _Stop(Exception):
    def __init__(self, error: str) -> None:
        self.error = error


class AsyncProviderClient:
    """Calls provider endpoints from the event loop; build one per process and reuse it.

    The session is opened on the first call, on the loop that makes it (aiohttp binds a session
    to one loop), and every later call reuses it and its pooled connections.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: AsyncResolver | Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._allow_private = settings.private_addresses_allowed
        self._default_timeout = settings.provider_timeout_seconds
        self._resolver = GuardedResolver(allow_private=self._allow_private, lookup=resolver)
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        # Per base URL: why it may not be called (None when it may); per (base, path): the URL.
        self._verdicts: dict[str, str | None] = {}
        self._urls: dict[tuple[str, str], URL] = {}
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
            headers=_HEADERS,
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

    def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> Coroutine[Any, Any, RawAnswer]:
        """POST /v1/executions; `payload_bytes` is the payload object's JSON, sent wrapped.
        (`send`'s coroutine itself: no coroutine of this method in between.)"""
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

    async def reconcile(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        """POST /v1/reconciliations for a key the platform used earlier."""
        return await self.send(
            target,
            "POST",
            RECONCILIATIONS_PATH,
            credential=target.credential,
            body=orjson.dumps({"providerIdempotencyKey": idempotency_key}),
            max_bytes=response_max_bytes,
            timeout=timeout,
        )

    async def get(
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
        return await self.send(
            target, "GET", path, credential=credential, max_bytes=max_bytes, timeout=timeout
        )

    async def fetch_artifact(self, target: DispatchTarget, digest: str, *, max_bytes: int) -> bytes:
        """Fetch `GET /v1/artifacts/{digest}` whole and return it only if its SHA-256 matches."""
        answer = await self.get(
            target, ARTIFACTS_PATH_PREFIX + digest, with_credential=True, max_bytes=max_bytes
        )
        if answer.error is not None:
            raise ArtifactFetchError(answer.error)
        if answer.status != 200 or answer.body is None:
            raise ArtifactFetchError(f"status {answer.status}")
        if hashlib.sha256(answer.body).hexdigest() != digest.lower():
            raise ArtifactFetchError("digest_mismatch")
        return answer.body

    def _verdict(self, base_url: str) -> str | None:
        """Why `base_url` may not be called without any lookup (syntax, literal address)."""
        try:
            return self._verdicts[base_url]
        except KeyError:
            pass
        # aiohttp never asks a resolver about a literal, so it is judged here (a pure function of
        # the text: cached), as the sync client judges it before its own request.
        verdict = check_base_url(base_url, allow_private=self._allow_private)
        if verdict is None:  # and the host exactly as yarl hands it to aiohttp to dial
            host = self._url(base_url, "/").raw_host
            verdict = (
                "no_host"
                if host is None
                else dialled_host_reason(host, allow_private=self._allow_private)
            )
        if len(self._verdicts) >= _MAX_CACHED_URLS:
            self._verdicts.clear()
        self._verdicts[base_url] = verdict
        return verdict

    def _url(self, base_url: str, path: str) -> URL:
        key = (base_url, path)
        url = self._urls.get(key)
        if url is None:
            url = URL(base_url.rstrip("/") + path)
            if len(self._urls) >= _MAX_CACHED_URLS:
                self._urls.clear()
            self._urls[key] = url
        return url

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
        """Make one request; the lower-level seam the conformance check uses for odd requests."""
        timeout = self._default_timeout if timeout is None else timeout
        started = time.monotonic()
        if self._verdict(target.base_url) is not None:
            return RawAnswer(None, None, ERROR_BLOCKED, 0.0)
        session = self._session or self._open()
        # The fixed headers are the session's own (sent first, in this order): a call adds
        # only its own, so aiohttp merges three headers instead of six.
        headers: dict[str, str] = {}
        if credential is not None:
            headers[AUTHORIZATION_HEADER] = f"Bearer {credential}"
        if idempotency_key is not None:
            headers[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = await session.request(
                method,
                self._url(target.base_url, path),
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=self._timeout(timeout),
            )
        except BlockedAddress:
            return RawAnswer(None, None, ERROR_BLOCKED, _ms(started))
        except TimeoutError:
            return RawAnswer(None, None, ERROR_TIMEOUT, _ms(started))
        except (UnresolvableHost, aiohttp.ClientConnectorError):
            # before ValueError: a certificate error is both (ssl.CertificateError is one)
            return RawAnswer(None, None, ERROR_CONNECT, _ms(started))
        except (aiohttp.InvalidURL, ValueError):
            return RawAnswer(None, None, ERROR_BLOCKED, _ms(started))
        except (aiohttp.ClientError, OSError):
            return RawAnswer(None, None, ERROR_READ, _ms(started))
        try:
            content = await _read_bounded(response, max_bytes, deadline=started + timeout)
        except _Stop as stop:
            response.close()  # drop the connection: its body was not read to the end
            return RawAnswer(response.status, None, stop.error, _ms(started))
        except BaseException:  # cancelled mid-body: never hand a half-read socket back
            response.close()
            raise
        response.release()
        error = ERROR_REDIRECT if 300 <= response.status < 400 else None
        return RawAnswer(response.status, content, error, _ms(started))


async def _read_bounded(
    response: aiohttp.ClientResponse, max_bytes: int, *, deadline: float
) -> bytes:
    """Read the raw body, stopping past `max_bytes` or `deadline` (raises _Stop)."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _Stop(ERROR_TOO_LARGE)
    content = response.content
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise _Stop(ERROR_TOO_LARGE)
            chunks.append(chunk)
            # aiohttp's total timeout covers the body too; the check between reads mirrors the
            # sync client's, so a trickling provider is cut off at the same point.
            if time.monotonic() > deadline:
                raise _Stop(ERROR_TIMEOUT)
            if content.at_eof():  # the whole body is in: no further read to learn it
                break
    except TimeoutError as exc:
        raise _Stop(ERROR_TIMEOUT) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise _Stop(ERROR_READ) from exc
    return b"".join(chunks)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000.0, 3)
