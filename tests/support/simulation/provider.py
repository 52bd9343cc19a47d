"""The simulated provider and the network in front of it, as one httpx request handler.

The platform reaches it through `SimProviderClient` (support/simulation/client.py), the async
provider client the simulation's Runtime carries; `transport()` serves the synchronous client.

The provider keeps spec 4.2's durable idempotency records (accepted → final, never a second
business run for a known key, reconciliation writes nothing and never claims SUCCEEDED for a
key it does not hold). The network in front of it loses requests before they arrive, and
damages answers after the provider has acted: timeouts, resets mid-body, malformed, truncated
and oversized bodies, status mismatches, redirects, unknown envelope members. Every choice comes
from the seeded RNG, so a seed replays the same faults in the same order.

The transport also records, per platform key, every execution and reconciliation exchange and
what the platform actually received; the rule "after an unknown outcome nothing is sent again
unless a reconciliation proved the key was never accepted" is checked as each execution arrives.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx
import orjson

from mercato.protocol import EXECUTIONS_PATH, IDEMPOTENCY_KEY_HEADER, RECONCILIATIONS_PATH
from support.simulation.trace import Recorder

RESPONSE_MAX_BYTES = 2048
"""The simulated versions' responseMaxBytes; oversized answers go past it."""

Answer = tuple[int, dict[str, Any]]

_FAULTS = (
    "timeout",
    "reset",
    "malformed",
    "truncated",
    "oversize",
    "oversize-chunked",
    "status-mismatch",
    "httpstatus-mismatch",
    "redirect",
    "extra-member",
)
_DEFINED_STATUSES = (400, 404, 409, 422, 500, 502, 504)


def envelope(outcome: str, correlation: str, **members: Any) -> dict[str, Any]:
    return {"outcome": outcome, "correlationId": correlation, **members}


RBA: Answer = (503, envelope("RETRYABLE_BEFORE_ACCEPT", "not-accepted"))


@dataclass
class Record:
    """One key's durable record: accepted, then final (never changed once final)."""

    fingerprint: str
    planned: Answer
    final: Answer | None = None
    runs: int = 1

    @property
    def charged_ok(self) -> bool:
        """The provider holds SUCCEEDED with a result that meets the simulated contract."""
        if self.final is None:
            return False
        body = self.final[1]
        result = body.get("result")
        return body["outcome"] == "SUCCEEDED" and isinstance(result, dict) and "echo" in result


@dataclass
class Exchange:
    kind: str  # execute | reconcile
    step: int
    delivered: str = "in flight"
    proof_not_accepted: bool = False


@dataclass
class _Call:
    """An exchange the provider has acted on; its answer is not delivered yet."""

    kind: str
    key: str
    exchange: Exchange
    answer: Answer
    silent: bool


@dataclass
class Knobs:
    """Fault rates; quiescence turns them all off."""

    drop: float = 0.05
    damage: float = 0.15
    damage_reconcile: float = 0.08
    silent_accept: float = 0.05
    unknown_accept: float = 0.08
    retryable: float = 0.05
    invalid_result: float = 0.05
    defined: float = 0.15


class ChunkedBody(httpx.SyncByteStream):
    """A streamed body without Content-Length; optionally breaks after the first chunk."""

    def __init__(self, chunks: list[bytes], *, reset: bool = False) -> None:
        self._chunks = chunks
        self._reset = reset

    def __iter__(self) -> Iterator[bytes]:
        for index, chunk in enumerate(self._chunks):
            yield chunk
            if self._reset and index == 0:
                raise httpx.ReadError("connection reset by simulated peer")


@dataclass
class SimProvider:
    rng: random.Random
    recorder: Recorder
    max_sends: int
    knobs: Knobs = field(default_factory=Knobs)
    records: dict[str, Record] = field(default_factory=dict)
    exchanges: dict[str, list[Exchange]] = field(default_factory=dict)
    down: bool = False
    unsure: bool = False
    streak_503: int = 0
    jobs: int = 0
    in_flight_hook: Callable[[str, str], Awaitable[bool]] | None = None

    # --- the transport ---------------------------------------------------------------------

    def transport(self) -> SimWire:
        """For the synchronous client (artifact fetches): no in-flight interleaving."""
        return SimWire(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        call = self._arrive(request)
        if isinstance(call, httpx.Response):
            return call
        return self._answer(request, call, broken=False)

    async def ahandle(self, request: httpx.Request) -> httpx.Response:
        """One request from the async client; the planned interleaving runs (awaited) while the
        provider has acted and its answer is still on the wire."""
        call = self._arrive(request)
        if isinstance(call, httpx.Response):
            return call
        hook = self.in_flight_hook
        broken = hook is not None and await hook(call.kind, call.key)
        return self._answer(request, call, broken=broken)

    def _arrive(self, request: httpx.Request) -> _Call | httpx.Response:
        path = request.url.path
        if path == EXECUTIONS_PATH:
            key = request.headers.get(IDEMPOTENCY_KEY_HEADER, "")
            return self._exchange(request, key, "execute")
        if path == RECONCILIATIONS_PATH:
            key = str(orjson.loads(request.content).get("providerIdempotencyKey", ""))
            return self._exchange(request, key, "reconcile")
        return _response(request, 404, b'{"error": "not found"}')

    def _exchange(self, request: httpx.Request, key: str, kind: str) -> _Call:
        history = self.exchanges.setdefault(key, [])
        if kind == "execute":
            self._check_send_allowed(key, history)
        exchange = Exchange(kind, self.recorder.step)
        history.append(exchange)
        if self.down or self.rng.random() < self.knobs.drop:
            exchange.delivered = "connect-error (never arrived)"
            self.recorder.note(f"net: {kind} {key} lost before arrival", key)
            raise httpx.ConnectError("simulated: request lost before arrival", request=request)
        if kind == "execute":
            answer, silent = self._execute(key, request)
        else:
            answer, silent = self._reconcile(key), False
        return _Call(kind, key, exchange, answer, silent)

    def _answer(self, request: httpx.Request, call: _Call, *, broken: bool) -> httpx.Response:
        kind, key, exchange = call.kind, call.key, call.exchange
        if broken:
            exchange.delivered = "connection broken (provider restarted)"
            raise httpx.ReadError("simulated: provider restarted mid-request", request=request)
        if call.silent:
            exchange.delivered = "timeout (accepted, no answer)"
            self.recorder.note(f"net: {kind} {key} accepted, answer timed out", key)
            raise httpx.ReadTimeout("simulated: provider did not answer in time", request=request)
        return self._deliver(request, key, kind, call.answer, exchange)

    def _check_send_allowed(self, key: str, history: list[Exchange]) -> None:
        sends = sum(1 for e in history if e.kind == "execute")
        if history and not history[-1].proof_not_accepted:
            last = history[-1]
            self.recorder.violate(
                "no-resend-after-unknown",
                f"execution #{sends + 1} of {key} after {last.kind} answered '{last.delivered}' "
                f"(step {last.step}) with no reconciliation proving it was never accepted",
                key,
            )
        if sends + 1 > self.max_sends:
            self.recorder.violate(
                "redispatch-bounded",
                f"execution #{sends + 1} of {key} exceeds {self.max_sends}",
                key,
            )

    # --- the provider's own rules (spec 4.2) -----------------------------------------------

    def _execute(self, key: str, request: httpx.Request) -> tuple[Answer, bool]:
        payload = orjson.loads(request.content)["payload"]
        fingerprint = hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
        record = self.records.get(key)
        if record is not None:
            if record.fingerprint != fingerprint:
                self.jobs += 1
                conflict = envelope(
                    "DEFINED_FAILURE", f"job-{self.jobs}", errorCode="KEY_REUSED", httpStatus=409
                )
                return (409, conflict), False
            return self._stored(record), False
        if self.streak_503 > 0 or self.rng.random() < self.knobs.retryable:
            self.streak_503 = max(self.streak_503 - 1, 0)
            return RBA, False
        self.jobs += 1
        record = Record(fingerprint=fingerprint, planned=self._plan(payload, f"job-{self.jobs}"))
        self.records[key] = record
        roll = self.rng.random()
        if roll < self.knobs.silent_accept:
            self.recorder.note(f"provider: accepted {key}, still running", key)
            return self._stored(record), True
        if roll < self.knobs.silent_accept + self.knobs.unknown_accept:
            self.recorder.note(f"provider: accepted {key}, answers UNKNOWN_OUTCOME", key)
            return self._stored(record), False
        record.final = record.planned
        self.recorder.note(f"provider: ran {key} → {_label(record.final)}", key)
        return record.final, False

    def _plan(self, payload: Any, correlation: str) -> Answer:
        roll = self.rng.random()
        if roll < self.knobs.defined:
            status = self.rng.choice(_DEFINED_STATUSES)
            body = envelope(
                "DEFINED_FAILURE", correlation, errorCode=f"SIM_{status}", httpStatus=status
            )
            return status, body
        if roll < self.knobs.defined + self.knobs.invalid_result:
            return 200, envelope("SUCCEEDED", correlation, result={"unexpected": True})
        status = self.rng.choice((200, 200, 200, 201))
        return status, envelope("SUCCEEDED", correlation, result={"echo": payload})

    def _stored(self, record: Record) -> Answer:
        if record.final is not None:
            return record.final
        return 202, envelope("UNKNOWN_OUTCOME", record.planned[1]["correlationId"])

    def _reconcile(self, key: str) -> Answer:
        record = self.records.get(key)
        if record is not None:
            return self._stored(record)
        if self.unsure:
            return 202, envelope("UNKNOWN_OUTCOME", "storage-unavailable")
        return RBA

    # --- provider lifecycle (driven by the simulation) -------------------------------------

    def finish_some(self, fraction: float) -> list[str]:
        """Let running jobs finish: accepted records become final with their planned answer."""
        done = []
        for key, record in self.records.items():
            if record.final is None and self.rng.random() < fraction:
                record.final = record.planned
                done.append(key)
        return done

    def restart(self, *, lose_in_flight: bool) -> list[str]:
        """Restart; with `lose_in_flight`, accepted-but-not-final records vanish (their
        transaction never committed). Final records are durable and always survive."""
        if not lose_in_flight:
            return []
        lost = [key for key, record in self.records.items() if record.final is None]
        for key in lost:
            del self.records[key]
        return lost

    # --- the network's damage --------------------------------------------------------------

    def _deliver(
        self, request: httpx.Request, key: str, kind: str, answer: Answer, exchange: Exchange
    ) -> httpx.Response:
        status, body = answer
        rate = self.knobs.damage if kind == "execute" else self.knobs.damage_reconcile
        fault = self.rng.choice(_FAULTS) if self.rng.random() < rate else None
        label = f"{status} {body['outcome']}"
        exchange.delivered = label if fault is None else f"{label} damaged by {fault}"
        exchange.proof_not_accepted = fault is None and answer == RBA
        self.recorder.note(f"net: {kind} {key} ← {exchange.delivered}", key)
        if fault is None:
            return _response(request, status, orjson.dumps(body))
        return _damaged(request, fault, status, body)


def _response(
    request: httpx.Request,
    status: int,
    raw: bytes,
    *,
    headers: dict[str, str] | None = None,
    chunked: bool = False,
    reset: bool = False,
) -> httpx.Response:
    """A streamed response, as a real transport gives (a bytes body would be pre-read)."""
    sent = dict(headers or {})
    sent["Content-Type"] = "application/json"
    if not chunked:
        sent["Content-Length"] = str(len(raw))
    chunks = [raw[i : i + 512] for i in range(0, len(raw), 512)] or [b""]
    if reset:
        chunks = [raw[: len(raw) // 2], raw[len(raw) // 2 :]]
    return httpx.Response(
        status, headers=sent, stream=ChunkedBody(chunks, reset=reset), request=request
    )


def _damaged(
    request: httpx.Request, fault: str, status: int, body: dict[str, Any]
) -> httpx.Response:
    raw = orjson.dumps(body)
    if fault == "timeout":
        raise httpx.ReadTimeout("simulated: answer lost in transit", request=request)
    if fault == "reset":
        return _response(request, status, raw, reset=True)
    if fault == "malformed":
        return _response(request, status, b"<html>upstream error</html>")
    if fault == "truncated":
        return _response(request, status, raw[: max(len(raw) - 7, 1)])
    if fault in ("oversize", "oversize-chunked"):
        padded = orjson.dumps({**body, "correlationId": "x" * (RESPONSE_MAX_BYTES + 64)})
        return _response(request, status, padded, chunked=fault == "oversize-chunked")
    if fault == "status-mismatch":
        wrong = {200: 500, 201: 409, 202: 200, 503: 500}.get(status, 200)
        return _response(request, wrong, raw)
    if fault == "httpstatus-mismatch":
        wrong_body = {**body, "httpStatus": 418 if status != 418 else 419}
        return _response(request, status, orjson.dumps(wrong_body))
    if fault == "redirect":
        headers = {"Location": "http://127.0.0.1:9/elsewhere"}
        return _response(request, 307, raw, headers=headers)
    assert fault == "extra-member"
    return _response(request, status, orjson.dumps({**body, "surprise": 1}))


def _label(answer: Answer) -> str:
    status, body = answer
    result = body.get("result")
    detail = "" if result is None or "echo" in result else " (result breaks the contract)"
    return f"{status} {body['outcome']}{detail}"


class SimWire:
    """The synchronous client's wire (`mercato.dispatch.client.Wire`) to the simulated provider:
    the request handed over as httpx's, the answer and every simulated failure handed back as
    httpcore's, which is what the client reads."""

    def __init__(self, handle: Callable[[httpx.Request], httpx.Response]) -> None:
        self._handle = handle

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        sent = httpx.Request(
            request.method.decode("ascii"),
            bytes(request.url).decode("ascii"),
            headers=request.headers,
            content=b"".join(request.stream),  # type: ignore[arg-type]
        )
        with _as_httpcore():
            answer = self._handle(sent)
        return httpcore.Response(
            answer.status_code, headers=answer.headers.raw, content=_chunks(answer)
        )

    def close(self) -> None:
        return None


def _chunks(answer: httpx.Response) -> Iterator[bytes]:
    with _as_httpcore():
        yield from answer.iter_raw()


@contextmanager
def _as_httpcore() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise httpcore.ReadTimeout(str(exc)) from exc
    except httpx.ConnectError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    except httpx.TransportError as exc:
        raise httpcore.ReadError(str(exc)) from exc
