"""A real platform for the client's functional tests: `mercato serve` on 127.0.0.1 in front of
a real SDK echo provider, a seeded caller (points, API key), and a tampering HTTP proxy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from builders.accounts import make_account, make_api_key
from builders.catalog import approve_connection, example_contract, publish
from builders.platform_process import Serve, free_port, mercato, platform_env
from builders.provider import CREDENTIAL
from builders.provider_process import ProviderProcess
from builders.servers import serve_in_thread, stop_server
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.settings import Settings

SERVICE = "acme.echo"
CALLER = "caller@example.com"
POINTS = 100
PRICE = 10
CONTRACT = example_contract(
    requestMaxBytes=4096,
    requestSchema={"type": "object", "additionalProperties": True},
    resultSchema={"type": "object", "required": ["echo"]},
)


@dataclass
class Platform:
    """Everything a client test needs; `runtime` reads the same database as `serve`."""

    env: dict[str, str]
    runtime: Runtime
    provider: ProviderProcess
    api_key: str
    caller_id: str
    logs: Path
    port: int = field(default_factory=free_port)
    serve: Serve | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def blobs(self) -> Path:
        return Path(self.env["MERCATO_DATA_DIR"]) / "blobs"

    def start(self, *, failpoints: str = "") -> Serve:
        self.serve = Serve(
            self.env,
            self.logs / f"serve-{utcnow():%H%M%S%f}.log",
            port=self.port,
            failpoints=failpoints,
        )
        return self.serve

    def stop(self) -> None:
        if self.serve is not None:
            self.serve.stop()

    def balances(self) -> tuple[int, int]:
        with self.runtime.db.read() as session:
            current = ledger.balances(session, account_id=self.caller_id)
        return current.available, current.reserved

    def run_worker_once(self) -> None:
        ran = mercato("worker", "--once", env=self.env)
        assert ran.returncode == 0, ran.stderr

    def ledger_balanced(self) -> bool:
        report = mercato("admin", "verify-ledger", "--json", env=self.env)
        return report.returncode == 0 and '"balanced": true' in report.stdout


def build_platform(db_url: str, tmp_path: Path) -> Platform:
    """Seed a caller and a published echo version bound to a real SDK provider process."""
    data_dir = tmp_path / "data"
    # A real SDK provider with a durable store answers within the 1 s of `platform_env` alone,
    # not always on a loaded two-core CI machine; a call that timed out stays pending, which no
    # test here is about (the suite failed once that way).
    env = platform_env(db_url, data_dir, MERCATO_PROVIDER_TIMEOUT_SECONDS="10")
    runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))
    workdir = tmp_path / "provider"
    workdir.mkdir()
    provider = ProviderProcess(store=f"sqlite:///{workdir / 'store.db'}", workdir=workdir)
    provider.start("--blobs", str(workdir / "blobs"))
    caller_id = make_account(runtime.db, CALLER, password=None)
    owner_id = make_account(runtime.db, "provider@example.com", password=None)
    now = utcnow()
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=caller_id, amount=POINTS, now=now)
        connection = providers.create_connection(
            session,
            owner_id=owner_id,
            name="echo",
            base_url=provider.base_url,
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=now,
        )
        connection_id = connection.id
    approve_connection(runtime, connection_id)
    publish(runtime, connection_id, service_code=SERVICE, price=PRICE, contract=CONTRACT)
    api_key, _ = make_api_key(runtime.db, caller_id)
    logs = tmp_path / "logs"
    logs.mkdir()
    return Platform(env, runtime, provider, api_key, caller_id, logs)


Rule = Callable[[str, str], bool]


class TamperingProxy:
    """An HTTP proxy on 127.0.0.1 that forwards to `upstream` and can misbehave on purpose:
    drop the response of a matching request (the request still reaches the platform), or
    flip one byte of matching response bodies."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.lock = threading.Lock()
        self.drops: list[Rule] = []
        self.corrupt: list[Rule] = []
        self.dropped = 0
        self.forwarded: list[tuple[str, str]] = []
        self._http = httpx.Client(timeout=30)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = serve_in_thread(self._server, "tampering-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def drop_response_once(self, rule: Rule) -> None:
        with self.lock:
            self.drops.append(rule)

    def corrupt_bodies(self, rule: Rule) -> None:
        with self.lock:
            self.corrupt.append(rule)

    def close(self) -> None:
        stop_server(self._server, self._thread)
        self._http.close()

    def _take_drop(self, method: str, path: str) -> bool:
        with self.lock:
            for rule in self.drops:
                if rule(method, path):
                    self.drops.remove(rule)
                    self.dropped += 1
                    return True
            return False

    def _forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length", "0"))
        body = handler.rfile.read(length) if length else b""
        skip = {"host", "connection", "content-length", "accept-encoding"}
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
        with self.lock:
            self.forwarded.append((method, handler.path))
        answer = self._http.request(
            method, self.upstream + handler.path, content=body, headers=headers
        )
        if self._take_drop(method, handler.path):
            handler.close_connection = True  # the platform did the work; the caller hears nothing
            return
        content = answer.content
        with self.lock:
            corrupt = any(rule(method, handler.path) for rule in self.corrupt)
        if corrupt and content:
            content = content[:-1] + bytes([content[-1] ^ 0xFF])
        handler.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in {"content-length", "transfer-encoding", "connection"}:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        handler.wfile.write(content)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self, "GET")

            def do_POST(self) -> None:
                proxy._forward(self, "POST")

        return Handler
