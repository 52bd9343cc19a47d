"""Test providers: a minimal correct provider on 127.0.0.1 with switchable faults, and builders.

`ReferenceProvider` is written from spec 4.2 alone (it does not use the SDK) so that conformance
tests judge the platform's check, not the SDK. Each `Faults` switch breaks exactly one rule.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from sqlalchemy.orm import Session

from builders.servers import serve_in_thread, stop_server
from mercato.providers import service as providers
from mercato.providers.schemas import CheckVerdict
from mercato.settings import Settings

CREDENTIAL = "conn-secret-0123456789abcdef"

JunkAnswer = Literal["succeeded", "defined_failure", "unknown_outcome"]
KnownKeyAnswer = Literal["stored", "retryable", "unknown", "defined_failure"]


@dataclass(frozen=True)
class Faults:
    """Each field, when changed from its default, breaks one provider rule."""

    accept_missing_credential: bool = False
    accept_wrong_credential: bool = False
    status_mismatch: bool = False
    unstable_replay: bool = False
    conflict_replays_stored: bool = False
    accept_unknown_fields: bool = False
    known_key_answer: KnownKeyAnswer = "stored"
    unknown_key_succeeds: bool = False
    live_status: int = 200
    ready_status: int = 200
    execution_broken: bool = False
    junk_answer: JunkAnswer = "succeeded"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class _Record:
    fingerprint: str
    status: int
    envelope: dict[str, Any]


@dataclass
class ProviderState:
    credential: str
    faults: Faults
    records: dict[str, _Record] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))


def _handler(state: ProviderState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any = None, *, raw: bytes | None = None) -> None:
            data = raw if raw is not None else json.dumps(body or {}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _read(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with state.lock:
                state.seen.append(Seen(self.command, self.path, dict(self.headers), body))
            return body

        def do_GET(self) -> None:
            self._read()
            if self.path == "/health/live":
                self._send(state.faults.live_status, {"status": "live"})
            elif self.path == "/health/ready":
                self._send(state.faults.ready_status, {"status": "ready"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            raw = self._read()
            if not self._authorised():
                self._send(401, {"error": "unauthorised"})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": "not json"})
                return
            with state.lock:
                if self.path == "/v1/executions":
                    self._execute(body)
                elif self.path == "/v1/reconciliations":
                    self._reconcile(body)
                else:
                    self._send(404, {"error": "not found"})

        def _authorised(self) -> bool:
            header = self.headers.get("Authorization")
            if header is None:
                return state.faults.accept_missing_credential
            if header == f"Bearer {state.credential}":
                return True
            return state.faults.accept_wrong_credential

        def _execute(self, body: Any) -> None:
            faults = state.faults
            if not isinstance(body, dict):
                self._send(400, {"error": "body must be an object"})
                return
            if set(body) - {"payload"} and not faults.accept_unknown_fields:
                self._send(400, {"error": "unknown top-level field"})
                return
            payload = body.get("payload")
            if not isinstance(payload, dict) or not payload:
                self._send(400, {"error": "payload must be a non-empty object"})
                return
            if faults.execution_broken:
                self._send(500, raw=b"internal error")
                return
            key = self.headers.get("Idempotency-Key") or ""
            fingerprint = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
            record = state.records.get(key)
            if record is not None:
                if record.fingerprint != fingerprint and not faults.conflict_replays_stored:
                    self._send(
                        409,
                        {
                            "outcome": "DEFINED_FAILURE",
                            "correlationId": f"job-conflict-{next(state.counter)}",
                            "errorCode": "IDEMPOTENCY_KEY_REUSED",
                            "httpStatus": 409,
                        },
                    )
                    return
                envelope = dict(record.envelope)
                if faults.unstable_replay:
                    envelope["correlationId"] = f"job-{next(state.counter)}"
                self._send(record.status, envelope)
                return
            status, envelope = self._business()
            state.records[key] = _Record(fingerprint, status, envelope)
            self._send(status, envelope)

        def _business(self) -> tuple[int, dict[str, Any]]:
            job = f"job-{next(state.counter)}"
            faults = state.faults
            if faults.junk_answer == "defined_failure":
                return 400, {
                    "outcome": "DEFINED_FAILURE",
                    "correlationId": job,
                    "errorCode": "INVALID_PAYLOAD",
                    "httpStatus": 400,
                }
            if faults.junk_answer == "unknown_outcome":
                return 202, {"outcome": "UNKNOWN_OUTCOME", "correlationId": job}
            status = 500 if faults.status_mismatch else 200
            return status, {"outcome": "SUCCEEDED", "correlationId": job, "result": {"ok": True}}

        def _reconcile(self, body: Any) -> None:
            key = body.get("providerIdempotencyKey") if isinstance(body, dict) else None
            if not isinstance(key, str) or set(body) != {"providerIdempotencyKey"}:
                self._send(400, {"error": "bad reconciliation request"})
                return
            record = state.records.get(key)
            answer = state.faults.known_key_answer
            if record is None or answer == "retryable":
                if record is None and state.faults.unknown_key_succeeds:
                    self._send(
                        200,
                        {"outcome": "SUCCEEDED", "correlationId": "ghost", "result": {}},
                    )
                    return
                self._send(503, {"outcome": "RETRYABLE_BEFORE_ACCEPT", "correlationId": "none"})
            elif answer == "unknown":
                self._send(202, {"outcome": "UNKNOWN_OUTCOME", "correlationId": "unsure"})
            elif answer == "defined_failure":
                self._send(
                    422,
                    {
                        "outcome": "DEFINED_FAILURE",
                        "correlationId": record.envelope["correlationId"],
                        "errorCode": "SOMETHING_ELSE",
                        "httpStatus": 422,
                    },
                )
            else:
                self._send(record.status, record.envelope)

    return Handler


@dataclass
class RunningProvider:
    url: str
    state: ProviderState
    port: int

    @property
    def seen(self) -> list[Seen]:
        with self.state.lock:
            return list(self.state.seen)


@contextmanager
def reference_provider(
    faults: Faults | None = None, *, credential: str = CREDENTIAL
) -> Iterator[RunningProvider]:
    """Serve a provider on a free port of 127.0.0.1 until the block ends."""
    state = ProviderState(credential=credential, faults=faults or Faults())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = serve_in_thread(server, "reference-provider")
    port = server.server_address[1]
    try:
        yield RunningProvider(url=f"http://127.0.0.1:{port}", state=state, port=port)
    finally:
        stop_server(server, thread)


def with_faults(base: Faults, **changes: Any) -> Faults:
    return replace(base, **changes)


PASSING_NAMES = (
    "liveness",
    "readiness",
    "execution_requires_credential",
    "execution_envelope_valid",
    "replay_is_stable",
    "fingerprint_conflict",
    "unknown_envelope_field_rejected",
    "known_key_reconciles",
    "unknown_key_does_not_claim_success",
)


def passing_verdicts() -> list[CheckVerdict]:
    """Nine `passed` verdicts, as a full conformance pass would record them."""
    return [
        CheckVerdict(i, name, "passed", {"status": 200, "latencyMs": 1.0})
        for i, name in enumerate(PASSING_NAMES, start=1)
    ]


def approved_connection(
    session: Session,
    *,
    owner_id: str,
    settings: Settings,
    now: dt.datetime,
    name: str = "test-connection",
    base_url: str = "http://127.0.0.1:9",
    credential: str = CREDENTIAL,
) -> str:
    """Create a connection, record a full pass for it without network, approve it; return its id."""
    connection = providers.create_connection(
        session,
        owner_id=owner_id,
        name=name,
        base_url=base_url,
        credential=credential,
        settings=settings,
        now=now,
    )
    providers.record_run(
        session,
        connection_id=connection.id,
        connection_revision=connection.revision,
        started_at=now,
        finished_at=now,
        checks=passing_verdicts(),
    )
    providers.approve_connection(session, connection_id=connection.id, now=now)
    return connection.id
