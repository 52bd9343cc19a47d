"""The client's behaviour, written once, free of I/O: flows are generators that yield steps.

A flow yields `Send` (the driver sends the request and sends back the response, or the
transport error) or `Sleep` (the driver sleeps, sends back None) and finally returns its
value. `MercatoClient` drives flows with httpx.Client and time.sleep, `AsyncMercatoClient`
with httpx.AsyncClient and asyncio.sleep, so retry and key-reuse logic exists only here.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import random
import tempfile
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import quote

import httpx

from mercato.client.errors import (
    ArtifactDigestMismatch,
    ArtifactNotReady,
    IdempotencyKeyInUse,
    InvocationPending,
    MercatoAPIError,
    RateLimitExceeded,
    TransportFailed,
    UnexpectedResponse,
    error_class,
)
from mercato.client.models import ArtifactEntry, InvocationResult, Receipt

T = TypeVar("T")

MIN_RETRY_AFTER = 0.1
# Transport errors after which the same request may be sent again: the platform may or may
# not have seen it, and every request the client repeats is safe to repeat (GETs, and invokes
# carrying the same Idempotency-Key).
RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on one logical call's retries and waiting (sleeps add up to `max_wait_seconds`)."""

    network_retries: int = 4
    max_wait_seconds: float = 120.0
    backoff_base: float = 0.25
    backoff_cap: float = 5.0
    poll_interval: float = 0.2
    poll_cap: float = 3.0


@dataclass(frozen=True, slots=True)
class Send:
    request: httpx.Request
    sink: Sink | None = None  # a 2xx body is streamed into it instead of being read


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float
    reason: str


Step = Send | Sleep
Reply = httpx.Response | httpx.TransportError | None
Flow = Generator[Step, Reply, T]


class Sink(Protocol):
    def write(self, chunk: bytes) -> None: ...


class BuildRequest(Protocol):
    def __call__(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = ...,
        params: Mapping[str, Any] | None = ...,
        headers: Mapping[str, str] | None = ...,
    ) -> httpx.Request: ...


def segment(value: str) -> str:
    return quote(value, safe="")


# --- errors --------------------------------------------------------------------------------


def _retry_after(response: httpx.Response, problem: dict[str, Any]) -> float | None:
    header = response.headers.get("retry-after")
    if header is not None:
        header = header.strip()
        if header.isdigit():
            return float(header)
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when.timestamp() - time.time())
    value = problem.get("retryAfter")
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def api_error(response: httpx.Response, *, idempotency_key: str | None = None) -> MercatoAPIError:
    """The typed exception for an error response (a problem document, or a bare HTTP error)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    code = problem.get("code")
    if not isinstance(code, str) or not code:
        code = f"HTTP_{response.status_code}"
    message = problem.get("message") or problem.get("title") or response.reason_phrase
    cls = error_class(code, response.status_code)
    return cls(
        str(message),
        code=code,
        status=response.status_code,
        problem=problem,
        retry_after=_retry_after(response, problem),
        idempotency_key=idempotency_key,
    )


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The body of a success answer, which the caller API always makes a JSON object."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UnexpectedResponse(f"Expected a JSON object from {response.request.url.path}.")
    return body


# --- waiting -------------------------------------------------------------------------------


class Budget:
    """Counts one logical call's consecutive network failures and total sleeping."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.waited = 0.0
        self.failures = 0
        self.polls = 0

    def fits(self, seconds: float) -> bool:
        return self.waited + seconds <= self.policy.max_wait_seconds

    def sleep(self, seconds: float, reason: str) -> Sleep:
        self.waited += seconds
        return Sleep(seconds, reason)

    def after_transport_error(
        self, error: httpx.TransportError, *, idempotency_key: str | None
    ) -> Flow[None]:
        """Back off before sending again, or raise once the retries or the wait run out."""
        self.failures += 1
        detail = type(error).__name__
        exhausted = self.failures > self.policy.network_retries
        if exhausted or not isinstance(error, RETRYABLE_TRANSPORT):
            raise TransportFailed(
                f"The platform could not be reached ({detail}) after {self.failures} attempt(s).",
                idempotency_key=idempotency_key,
            ) from error
        delay = min(self.policy.backoff_cap, self.policy.backoff_base * 2 ** (self.failures - 1))
        delay = delay / 2 + random.random() * delay / 2
        if not self.fits(delay):
            raise TransportFailed(
                f"The platform could not be reached ({detail}) within the wait budget.",
                idempotency_key=idempotency_key,
            ) from error
        yield self.sleep(delay, f"network error ({detail}); retrying")

    def answered(self) -> None:
        self.failures = 0

    def after_retry_after(self, error: MercatoAPIError, reason: str) -> Flow[None]:
        """Wait what the platform asked for, or raise `error` when that is over the budget."""
        if error.retry_after is None:
            raise error
        delay = max(error.retry_after, MIN_RETRY_AFTER)  # a zero would spin without waiting
        if not self.fits(delay):
            raise error
        yield self.sleep(delay, reason)

    def before_poll(self, *, invocation_id: str, idempotency_key: str) -> Flow[None]:
        self.polls += 1
        delay = min(self.policy.poll_cap, self.policy.poll_interval * 2 ** (self.polls - 1))
        if not self.fits(delay):
            raise InvocationPending(
                f"Invocation {invocation_id} is still pending; call again with the same "
                "Idempotency-Key to pick it up.",
                invocation_id=invocation_id,
                idempotency_key=idempotency_key,
            )
        yield self.sleep(delay, "pending: waiting for settlement")


# --- flows ---------------------------------------------------------------------------------


def request_flow(
    build: Callable[[], httpx.Request], policy: RetryPolicy, *, sink: Sink | None = None
) -> Flow[httpx.Response]:
    """Send one idempotent request, again after network errors; return the 2xx response."""
    budget = Budget(policy)
    while True:
        reply = yield Send(build(), sink)
        if isinstance(reply, httpx.TransportError):
            yield from budget.after_transport_error(reply, idempotency_key=None)
            continue
        assert reply is not None
        budget.answered()
        if reply.is_success:
            return reply
        raise api_error(reply)


def invoke_flow(
    build: BuildRequest,
    policy: RetryPolicy,
    *,
    service_code: str,
    version: str,
    body: bytes,
    idempotency_key: str,
) -> Flow[InvocationResult]:
    """Invoke under one Idempotency-Key until the call has a final answer.

    Network errors resend with the same key; 429 and 409 IDEMPOTENCY_KEY_IN_USE wait
    Retry-After and resend with the same key; a 202 is followed through its receipt until it
    is no longer pending, then the same request is replayed for the final answer (a replay
    spends nothing: DESIGN.md §3). A new key is never made here.
    """
    path = f"/v1/services/{segment(service_code)}/versions/{segment(version)}:invoke"
    headers = {"Idempotency-Key": idempotency_key, "Content-Type": "application/json"}
    budget = Budget(policy)
    invocation_id: str | None = None
    while True:
        if invocation_id is None:
            reply = yield Send(build("POST", path, content=body, headers=headers))
        else:
            reply = yield Send(build("GET", f"/v1/invocations/{segment(invocation_id)}"))
        if isinstance(reply, httpx.TransportError):
            yield from budget.after_transport_error(reply, idempotency_key=idempotency_key)
            continue
        assert reply is not None
        budget.answered()
        if invocation_id is not None:  # following the receipt
            if not reply.is_success:
                raise api_error(reply, idempotency_key=idempotency_key)
            if Receipt.from_json(json_object(reply)).pending:
                yield from budget.before_poll(
                    invocation_id=invocation_id, idempotency_key=idempotency_key
                )
            else:
                invocation_id = None  # settled: replay the invoke for the final answer
            continue
        if reply.status_code == 200:
            return InvocationResult.from_json(json_object(reply), idempotency_key=idempotency_key)
        if reply.status_code == 202:
            invocation_id = str(json_object(reply)["invocationId"])
            yield from budget.before_poll(
                invocation_id=invocation_id, idempotency_key=idempotency_key
            )
            continue
        error = api_error(reply, idempotency_key=idempotency_key)
        if isinstance(error, RateLimitExceeded):
            yield from budget.after_retry_after(error, "rate limited: waiting Retry-After")
        elif isinstance(error, IdempotencyKeyInUse):
            yield from budget.after_retry_after(error, "in progress: waiting Retry-After")
        else:
            raise error


class TempTarget:
    """A hidden temporary file beside `final`, hashed as written; renamed only by `commit`."""

    def __init__(self, final: Path) -> None:
        self.final = final
        handle, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
        self.path = Path(name)
        self._file: IO[bytes] = os.fdopen(handle, "wb")
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def reset(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self._hash = hashlib.sha256()
        self.size = 0

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def commit(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.path, self.final)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


def receipt_flow(build: BuildRequest, policy: RetryPolicy, invocation_id: str) -> Flow[Receipt]:
    path = f"/v1/invocations/{segment(invocation_id)}"
    response = yield from request_flow(lambda: build("GET", path), policy)
    return Receipt.from_json(json_object(response))


def find_entry(receipt: Receipt, artifact_id: str) -> ArtifactEntry:
    for entry in receipt.artifacts:
        if entry.artifact_id == artifact_id:
            return entry
    raise UnexpectedResponse(
        f"Invocation {receipt.invocation_id} has no artifact {artifact_id!r} in its manifest."
    )


def download_flow(
    build: BuildRequest,
    policy: RetryPolicy,
    *,
    invocation_id: str,
    artifact_id: str,
    path: Path,
    digest: str | None,
) -> Flow[Path]:
    """Stream one artifact into a temporary file, check its SHA-256 against the manifest
    digest, and only then rename it to `path`; on any failure no file is left behind."""
    if digest is None:
        receipt = yield from receipt_flow(build, policy, invocation_id)
        digest = find_entry(receipt, artifact_id).digest
    expected = digest.lower()
    url = f"/v1/invocations/{segment(invocation_id)}/artifacts/{segment(artifact_id)}"
    budget = Budget(policy)
    target = TempTarget(path)
    try:
        while True:
            target.reset()
            reply = yield Send(build("GET", url), target)
            if isinstance(reply, httpx.TransportError):
                yield from budget.after_transport_error(reply, idempotency_key=None)
                continue
            assert reply is not None
            budget.answered()
            if reply.is_success:
                break
            error = api_error(reply)
            if not isinstance(error, ArtifactNotReady):
                raise error
            yield from budget.after_retry_after(error, "artifact not fetched yet: waiting")
        actual = target.hexdigest()
        if actual != expected:
            raise ArtifactDigestMismatch(
                f"Artifact {artifact_id!r} of {invocation_id} hashes to {actual}, not the "
                f"manifest's {expected}; it was not saved.",
                expected=expected,
                actual=actual,
            )
        target.commit()
    except BaseException:
        target.discard()
        raise
    return path


def file_name(entry: ArtifactEntry) -> str:
    """A safe local file name for an artifact: its id, with an extension from its media type."""
    import mimetypes

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in entry.artifact_id)
    safe = safe.lstrip(".") or entry.digest
    if "." not in safe and entry.media_type:
        safe += mimetypes.guess_extension(entry.media_type.split(";")[0].strip()) or ""
    return safe
