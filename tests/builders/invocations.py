"""A scriptable provider on 127.0.0.1 and a ready-to-invoke world for invocation tests.

`ScriptedProvider` answers each execution from a script (then behaves as a correct provider)
and counts, per platform key, every execution request, every business execution and every
reconciliation: the numbers the fault matrix asserts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from builders.servers import QuietThreadingHTTPServer, serve_in_thread, stop_server
from mercato.catalog.schemas import InvocableVersion

CREDENTIAL = "scripted-credential-0123456789abcdef"


def invocable_version(
    *,
    provider_account_id: str,
    label: str = "v1",
    price: int = 7,
    share_bps: int = 7000,
    name: str = "script",
) -> InvocableVersion:
    """A published version's facts as `invocations.accept` takes them, without a catalog: its
    ids and service code made from `name` and `label`, the rest fixed."""
    return InvocableVersion(
        version_id=f"ver_{name}_{label}",
        listing_id=f"lst_{name}",
        service_code=f"{name}.echo",
        version=label,
        price=price,
        contract={"resultSchema": {"type": "object"}},
        contract_digest="c" * 64,
        request_max_bytes=512,
        response_max_bytes=4096,
        has_artifact_contract=False,
        connection_id=f"con_{name}",
        provider_account_id=provider_account_id,
        provider_share_bps=share_bps,
    )


def envelope(outcome: str, **members: Any) -> bytes:
    return json.dumps({"outcome": outcome, "correlationId": "corr-1", **members}).encode()


@dataclass
class Act:
    """One scripted answer. `accept` records the key as executed (stored outcome: `stored`)."""

    status: int = 200
    body: bytes | None = None
    accept: bool = True
    stored: tuple[int, bytes] | None = None
    drop: bool = False
    truncate: bool = False
    hang: bool = False
    oversize: int = 0
    chunked: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    gate: threading.Event | None = None
    arrived: threading.Event | None = None  # set when the request is in, before the gate


def _definite(act: Act) -> tuple[int, bytes] | None:
    """A valid definite answer (success or defined failure) is stored as sent; anything else
    stores the business result (the provider did the work but answered badly)."""
    from mercato.dispatch.outcomes import classify

    if act.drop or act.hang or act.truncate or act.oversize or act.body is None:
        return None
    answer = _Answer(act.status, act.body)
    return (act.status, act.body) if classify(answer).definite else None


@dataclass(frozen=True)
class _Answer:
    status: int | None
    body: bytes | None
    error: str | None = None


def ok(result: dict[str, Any] | None = None) -> Act:
    return Act(200, envelope("SUCCEEDED", result=result or {"echo": True}))


def defined(status: int = 400, code: str = "BAD_INPUT") -> Act:
    body = envelope("DEFINED_FAILURE", errorCode=code, httpStatus=status)
    return Act(status, body, stored=(status, body))


def retryable() -> Act:
    return Act(503, envelope("RETRYABLE_BEFORE_ACCEPT"), accept=False)


def unknown(*, accept: bool = True) -> Act:
    return Act(202, envelope("UNKNOWN_OUTCOME"), accept=accept)


def raw(status: int, body: bytes, *, accept: bool = True, **extra: Any) -> Act:
    return Act(status, body, accept=accept, **extra)


class ScriptedProvider:
    """Provider endpoints of spec 4.2 with scripted faults; state lives in memory."""

    def __init__(self) -> None:
        self.executions: Counter[str] = Counter()
        self.business: Counter[str] = Counter()
        self.reconciliations: Counter[str] = Counter()
        self.payloads: dict[str, list[bytes]] = {}
        self.store: dict[str, tuple[str, int, bytes]] = {}
        self.exec_script: list[Act] = []
        self.recon_script: list[Act] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.seen_headers: list[dict[str, str]] = []
        self.events: list[tuple[str, str, Act]] = []  # (key, "exec" | "recon", answer)
        self._server = QuietThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedProvider:
        self._thread = serve_in_thread(self._server, "scripted-provider")
        return self

    def stop(self) -> None:
        self.release.set()
        for act in self.exec_script:
            if act.gate is not None:
                act.gate.set()
        stop_server(self._server, self._thread)

    def script(self, *acts: Act) -> None:
        with self.lock:
            self.exec_script.extend(acts)

    def script_reconciliation(self, *acts: Act) -> None:
        with self.lock:
            self.recon_script.extend(acts)

    # -- behaviour ------------------------------------------------------------------------

    def _execute(self, key: str, payload: bytes) -> Act:
        fingerprint = hashlib.sha256(payload).hexdigest()
        with self.lock:
            self.executions[key] += 1
            self.payloads.setdefault(key, []).append(payload)
            act = self.exec_script.pop(0) if self.exec_script else None
            if act is None:
                if key in self.store:
                    stored_fp, status, body = self.store[key]
                    if stored_fp != fingerprint:
                        return defined(409, "FINGERPRINT_CONFLICT")
                    return Act(status, body)
                act = ok({"echo": json.loads(payload)})
            if act.accept and key not in self.store:
                self.business[key] += 1
                status, body = (
                    act.stored
                    or _definite(act)
                    or (
                        200,
                        envelope("SUCCEEDED", result={"echo": json.loads(payload)}),
                    )
                )
                self.store[key] = (fingerprint, status, body)
            return act

    def _reconcile(self, key: str) -> Act:
        with self.lock:
            self.reconciliations[key] += 1
            if self.recon_script:
                return self.recon_script.pop(0)
            if key in self.store:
                _, status, body = self.store[key]
                return Act(status, body)
            return retryable()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per answer

            def log_message(self, *_args: Any) -> None:
                pass

            def _read(self) -> bytes:
                length = int(self.headers.get("Content-Length", "0"))
                return self.rfile.read(length)

            def do_GET(self) -> None:
                self._send(Act(200, b'{"status":"ok"}'))

            def do_POST(self) -> None:
                body = self._read()
                provider.seen_headers.append(dict(self.headers.items()))
                if self.headers.get("Authorization") != f"Bearer {CREDENTIAL}":
                    self._send(Act(401, b'{"error":"unauthorized"}'))
                    return
                if self.path == "/v1/executions":
                    key = self.headers.get("Idempotency-Key", "")
                    payload = json.dumps(json.loads(body)["payload"]).encode()
                    act = provider._execute(key, payload)
                    provider.events.append((key, "exec", act))
                    self._send(act)
                elif self.path == "/v1/reconciliations":
                    key = json.loads(body)["providerIdempotencyKey"]
                    act = provider._reconcile(key)
                    provider.events.append((key, "recon", act))
                    self._send(act)
                else:
                    self._send(Act(404, b"{}"))

            def _send(self, act: Act) -> None:
                if act.arrived is not None:
                    act.arrived.set()
                if act.hang:
                    provider.release.wait(30)  # until stop(); far beyond any timeout
                if act.gate is not None:
                    act.gate.wait(30)
                if act.drop:
                    self.close_connection = True
                    return
                body = act.body if act.body is not None else b"{}"
                if act.oversize:
                    body = b'{"outcome":"SUCCEEDED","pad":"' + b"x" * act.oversize + b'"}'
                self.send_response(act.status)
                self.send_header("Content-Type", "application/json")
                for name, value in act.headers.items():
                    self.send_header(name, value)
                if act.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(body), 4096):
                        chunk = body[start : start + 4096]
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                declared = len(body) + (50 if act.truncate else 0)
                self.send_header("Content-Length", str(declared))
                self.end_headers()
                self.wfile.write(body)
                if act.truncate:
                    self.close_connection = True

        return Handler


@contextmanager
def scripted_provider() -> Iterator[ScriptedProvider]:
    provider = ScriptedProvider().start()
    try:
        yield provider
    finally:
        provider.stop()


class ConnectionCounter:
    """A listener that only counts TCP connections (redirect targets must see none)."""

    def __init__(self) -> None:
        import socket

        self.count = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.close()
            if self._stop.is_set():
                return  # the wake-up from close(), not a client
            self.count += 1

    def close(self) -> None:
        import socket

        self._stop.set()
        with suppress(OSError):  # wake the blocking accept at once
            socket.create_connection(self._sock.getsockname()[:2], timeout=1).close()
        self._thread.join()
        self._sock.close()


class ServerThread:
    """Serve an ASGI app with uvicorn on 127.0.0.1 in a thread (real HTTP, real concurrency);
    started and stopped by events (builders.servers.PromptUvicorn)."""

    def __init__(self, app: Any) -> None:
        import socket

        from builders.servers import uvicorn_thread

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.server, self.thread = uvicorn_thread(app, self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        if not self.server.ready.wait(30) or not self.server.started:
            self.server.stop()
            raise RuntimeError("uvicorn did not start")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.stop()
        self.thread.join(10)


def proves_non_acceptance(act: Act) -> bool:
    """Whether the platform received a valid RETRYABLE_BEFORE_ACCEPT answer from `act`."""
    if act.drop or act.hang or act.truncate or act.oversize or act.status != 503:
        return False
    try:
        body = json.loads(act.body or b"")
    except ValueError:
        return False
    return (
        isinstance(body, dict)
        and body.get("outcome") == "RETRYABLE_BEFORE_ACCEPT"
        and set(body) <= {"outcome", "correlationId", "httpStatus"}
    )
