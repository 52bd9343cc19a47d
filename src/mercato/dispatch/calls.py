"""The provider client: one set of calls over two transports, behind one guard (spec 4.2,
DESIGN.md §7).

`ProviderCalls` is everything a provider call is, whatever carries it: the calls of the provider
contract (`execute`, `reconcile`, `get`, `send`), the headers a call adds, the guard's verdict on
the URL (`mercato.dispatch.guard`), the bounded read of the answer and the `RawAnswer` it
becomes. Two transports carry it, each a subclass that implements `send` and `_parse`:

- `mercato.dispatch.client.ProviderClient`: httpcore's connection pool over a network backend
  that dials only guard-checked addresses, blocking (conformance checks, artifact pulls, the CLI);
- `mercato.dispatch.async_client.AsyncProviderClient`: aiohttp on the event loop, whose resolver
  is the guard (the invoke path, the worker's reconciliations).

Every rule holds on both, and the parity tests pin that they answer alike:

- **The SSRF guard**: the base URL and the host the transport will dial are judged before the
  request (`_url`, once per URL: a pure function of the text); every new connection
  resolves the name once, refuses the whole answer when any address is not public, and dials only
  the checked addresses (TLS still gets the name for SNI and the certificate).
- **No redirects**: a 3xx comes back as it is, with `error="redirect"`.
- **One deadline**: the call's timeout bounds the connect, every read and the whole call; the body
  loop checks it between reads, so a trickling provider is cut off.
- **The response byte cap**: a declared `Content-Length` over the cap is refused before reading;
  otherwise reading stops as soon as the bytes read pass the cap, and the connection is dropped.
- **Errors are answers**: every transport failure becomes `RawAnswer.error`, with the names below,
  so `mercato.dispatch.outcomes.classify` reads both alike.
- No cookie jar (a provider's `Set-Cookie` is never sent back), no decompression
  (`Accept-Encoding: identity`, raw bytes), no environment proxies. The credential goes only into
  the `Authorization` header: never logged, never returned, never part of an error.

A subclass with an `observer` (`mercato.dispatch.observed`) is told of every call's credential
before it is sent and of every answer.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import ClassVar, Final, Generic, Protocol, TypeVar

import orjson

from mercato.dispatch.guard import check_base_url, dialled_host_reason
from mercato.protocol import (
    AUTHORIZATION_HEADER,
    EXECUTIONS_PATH,
    IDEMPOTENCY_KEY_HEADER,
    RECONCILIATIONS_PATH,
)
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

__all__ = [
    "ACCEPT_HEADERS",
    "ERROR_BLOCKED",
    "ERROR_CONNECT",
    "ERROR_READ",
    "ERROR_REDIRECT",
    "ERROR_TIMEOUT",
    "ERROR_TOO_LARGE",
    "KEEPALIVE_SECONDS",
    "ArtifactFetchError",
    "Body",
    "Call",
    "CallObserver",
    "Failures",
    "ProviderCalls",
    "RawAnswer",
    "Stop",
    "failure",
    "verify_artifact",
]

# RawAnswer.error values.
ERROR_TIMEOUT = "timeout"
ERROR_CONNECT = "connect"
ERROR_READ = "read"
ERROR_TOO_LARGE = "too_large"
ERROR_REDIRECT = "redirect"
ERROR_BLOCKED = "blocked_address"

KEEPALIVE_SECONDS: Final = 4.0
"""How long an idle pooled connection is kept for another call, by both transports: under the
5 s after which uvicorn (the provider SDK's server, and FastAPI's usual one), Node and Apache
close an idle keep-alive connection. Kept for 5 s as well, a connection idle for just under 5 s
by the pool's clock was reused as the provider's own timer closed it, the call reset unanswered:
on the invoke path an unknown outcome, answered 202 and left for reconciliation, though the
provider never saw the call (decision 0500). The pool drops it first, so such a race needs the
process to stall for a second between taking the connection and writing the call."""

ACCEPT_HEADERS: Final = {"Accept": "application/json", "Accept-Encoding": "identity"}
"""The first two headers of every call, on both transports (each adds its own after them)."""

_MAX_CACHED_URLS = 4096

A = TypeVar("A")
"""What a transport's `send` returns: a `RawAnswer`, or a coroutine that gives one."""
U = TypeVar("U")
"""A transport's parsed URL."""
Failures = tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...]
"""A transport's exceptions, in the order they are tested, and the error each one becomes."""


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


class ArtifactFetchError(Exception):
    """An artifact could not be fetched whole and verified; `reason` says why (no secrets)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class CallObserver(Protocol):
    """Told of each call: its credential before anything is sent, then its answer."""

    def sending(self, credential: str | None) -> None: ...

    def answered(
        self, target: DispatchTarget, method: str, path: str, answer: RawAnswer
    ) -> None: ...


class Stop(Exception):
    """The body was not read whole; `error` names why (a `RawAnswer.error`)."""

    def __init__(self, error: str) -> None:
        self.error = error


class Body:
    """One answer's body as it is read, without I/O: a transport hands it the answer's declared
    length (`start`), then each chunk it reads (`add`); past the byte cap or the call's deadline
    it raises `Stop`."""

    __slots__ = ("_chunks", "_deadline", "_max_bytes", "_size")

    def __init__(self, max_bytes: int, deadline: float) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._max_bytes = max_bytes
        self._deadline = deadline

    def start(self, declared: str | None) -> None:
        """`declared`: the answer's Content-Length, if it has one (over the cap: refused now)."""
        if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
            raise Stop(ERROR_TOO_LARGE)

    def add(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._max_bytes:
            raise Stop(ERROR_TOO_LARGE)
        self._chunks.append(chunk)
        # Per-read timeouts alone let a trickling provider run forever; bound the whole call.
        if time.monotonic() > self._deadline:
            raise Stop(ERROR_TIMEOUT)

    def content(self) -> bytes:
        return b"".join(self._chunks)


class Call(Body, Generic[U]):
    """One request a transport is to make (the guard passed its URL: `ProviderCalls._url`), and
    its answer's body as it is read (one object a call). `headers` are the call's own, to follow
    the transport's fixed ones; `data` is the request body; `started` is when `send` was called
    (`time.monotonic`), and the call ends at `started + timeout`."""

    __slots__ = ("data", "headers", "method", "path", "started", "target", "timeout", "url")

    def __init__(
        self,
        target: DispatchTarget,
        method: str,
        path: str,
        url: U,
        headers: dict[str, str],
        data: bytes | None,
        max_bytes: int,
        timeout: float,
        started: float,
    ) -> None:
        self._chunks = []
        self._size = 0
        self._max_bytes = max_bytes
        self._deadline = started + timeout
        self.target = target
        self.method = method
        self.path = path
        self.url = url
        self.headers = headers
        self.data = data
        self.timeout = timeout
        self.started = started


def failure(exc: BaseException, failures: Failures) -> str:
    """The `RawAnswer.error` a transport's exception becomes (`exc` is one of `failures`)."""
    for kinds, error in failures:
        if isinstance(exc, kinds):
            return error
    raise exc


def verify_artifact(answer: RawAnswer, digest: str) -> bytes:
    """The body of an artifact's answer, only if it is whole and its SHA-256 is `digest`."""
    if answer.error is not None:
        raise ArtifactFetchError(answer.error)
    if answer.status != 200 or answer.body is None:
        raise ArtifactFetchError(f"status {answer.status}")
    if hashlib.sha256(answer.body).hexdigest() != digest.lower():
        raise ArtifactFetchError("digest_mismatch")
    return answer.body


class ProviderCalls(Generic[A, U]):
    """The calls to a provider endpoint; a transport subclass implements `_parse`, `_exchange`
    and `_refused`. Build one per process and reuse it (it pools connections)."""

    observer: ClassVar[CallObserver | None] = None

    def __init__(self, settings: Settings) -> None:
        self._allow_private = settings.private_addresses_allowed
        self._default_timeout = settings.provider_timeout_seconds
        # Per (base URL, path): the transport's URL, or None where the guard refuses the call.
        self._urls: dict[tuple[str, str], U | None] = {}

    def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> A:
        """POST /v1/executions; `payload_bytes` is the payload object's JSON, sent wrapped.
        (`send`'s own answer: on the event loop its coroutine, with none of this method's.)"""
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
    ) -> A:
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
    ) -> A:
        """GET `path` under the connection's base URL."""
        credential = target.credential if with_credential else None
        return self.send(
            target, "GET", path, credential=credential, max_bytes=max_bytes, timeout=timeout
        )

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
    ) -> A:
        """Make one request; the lower-level seam the conformance check uses for odd requests.
        `timeout` None is the settings' provider timeout."""
        timeout = self._default_timeout if timeout is None else timeout
        started = time.monotonic()
        if self.observer is not None:
            self.observer.sending(credential)
        url = self._url(target.base_url, path)
        if url is None:
            answer = RawAnswer(None, None, ERROR_BLOCKED, 0.0)
            if self.observer is not None:
                self.observer.answered(target, method, path, answer)
            return self._refused(answer)
        # The call's own headers, after the transport's fixed ones, in this order.
        headers: dict[str, str] = {}
        if credential is not None:
            headers[AUTHORIZATION_HEADER] = f"Bearer {credential}"
        if idempotency_key is not None:
            headers[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        if body is not None:
            headers["Content-Type"] = "application/json"
        return self._exchange(
            Call(target, method, path, url, headers, body, max_bytes, timeout, started)
        )

    def _exchange(self, call: Call[U]) -> A:
        """The transport's part of `send`: make `call` and return its answer (`_answered`)."""
        raise NotImplementedError

    def _refused(self, answer: RawAnswer) -> A:
        """`answer`, as the transport's `send` returns one."""
        raise NotImplementedError

    def _parse(self, url: str) -> tuple[U, str | None]:
        """The transport's URL for `url` and the host its library will dial (None: no host);
        raises ValueError for a URL the library refuses."""
        raise NotImplementedError

    def _url(self, base_url: str, path: str) -> U | None:
        """The URL to request for `path` under `base_url`, or None where the guard refuses it.
        A pure function of the text, so each pair is judged and parsed once."""
        key = (base_url, path)
        try:
            return self._urls[key]
        except KeyError:
            pass
        allow_private = self._allow_private
        found: U | None = None
        if check_base_url(base_url, allow_private=allow_private) is None:
            try:  # the text passes: now the host as the transport's library read it
                url, host = self._parse(base_url.rstrip("/") + path)
            except ValueError:
                url, host = None, None
            if host is not None and dialled_host_reason(host, allow_private=allow_private) is None:
                found = url
        if len(self._urls) >= _MAX_CACHED_URLS:
            self._urls.clear()
        self._urls[key] = found
        return found

    def _answered(
        self, call: Call[U], status: int | None, body: bytes | None, error: str | None
    ) -> RawAnswer:
        """The answer to `call` (`status` None: none came); a 3xx is never followed, but comes
        back as it is, with `redirect`."""
        if error is None and status is not None and 300 <= status < 400:
            error = ERROR_REDIRECT
        elapsed_ms = round((time.monotonic() - call.started) * 1000.0, 3)
        answer = RawAnswer(status, body, error, elapsed_ms)
        if self.observer is not None:
            self.observer.answered(call.target, call.method, call.path, answer)
        return answer
