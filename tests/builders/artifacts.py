"""Builders for artifact tests: settled invocations with a manifest, a fake provider client and
a real loopback provider."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import insert

from builders.accounts import make_account
from builders.servers import serve_in_thread, stop_server
from mercato.artifacts import service
from mercato.core.ids import new_id
from mercato.db.runtime import Runtime
from mercato.invocations.models import Invocation


def entry(data: bytes, artifact_id: str = "chart", media_type: str = "image/png") -> dict[str, Any]:
    """A manifest entry describing `data` truthfully."""
    return {
        "artifactId": artifact_id,
        "digest": hashlib.sha256(data).hexdigest(),
        "mediaType": media_type,
        "size": len(data),
    }


def make_invocation(
    runtime: Runtime,
    *,
    account_id: str,
    connection_id: str = "conn_none",
    settlement: str = "SETTLED",
    manifest: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Insert an invocation row in the given settlement, recording `manifest` when settled.

    The row is written directly: these tests exercise artifacts, not the invoke path.
    """
    now = runtime.clock.now()
    invocation_id = new_id("inv")
    terminal = settlement in {"SETTLED", "REFUNDED"}
    with runtime.db.transaction() as session:
        session.execute(
            insert(Invocation).values(
                id=invocation_id,
                account_id=account_id,
                idempotency_key=new_id("key"),
                fingerprint="0" * 64,
                channel="API_KEY",
                service_code="pixiv.daily-ranking",
                version="v1",
                version_id=new_id("ver"),
                contract_digest="0" * 64,
                connection_id=connection_id,
                provider_account_id=new_id("acc"),
                provider_share_bps=8000,
                price=10,
                has_artifact_contract=True,
                response_max_bytes=262144,
                result_schema={},
                payload=b'{"date":"2026-01-01"}',
                provider_key="mercato:" + invocation_id,
                state="SUCCEEDED" if terminal else "RECONCILING",
                settlement=settlement,
                reservation_id=new_id("res"),
                sends=1,
                reconciliations=0,
                result=b"{}" if terminal else None,
                artifacts=list(manifest) if terminal else None,
                created_at=now,
                updated_at=now,
                settled_at=now if terminal else None,
                refunded_at=now if settlement == "REFUNDED" else None,
            )
        )
        if terminal and manifest:
            service.record_manifest(
                session, invocation_id=invocation_id, entries=list(manifest), now=now
            )
    return invocation_id


def settled_call(
    runtime: Runtime,
    blobs: Mapping[str, bytes],
    *,
    email: str = "caller@example.com",
    connection_id: str = "conn_none",
    settlement: str = "SETTLED",
) -> tuple[str, str]:
    """A caller account and one of its calls whose manifest names `blobs`: (account, call)."""
    account_id = make_account(runtime.db, email)
    manifest = [entry(data, artifact_id) for artifact_id, data in blobs.items()]
    invocation_id = make_invocation(
        runtime,
        account_id=account_id,
        connection_id=connection_id,
        settlement=settlement,
        manifest=manifest,
    )
    return account_id, invocation_id


class FakeFetcher:
    """A provider client answering from a dict by digest; counts every fetch."""

    def __init__(self, objects: Mapping[str, bytes] | None = None) -> None:
        self.objects: dict[str, bytes] = dict(objects or {})
        self.fetches: list[str] = []
        self.targets: list[Any] = []
        self._lock = threading.Lock()

    def serve(self, data: bytes, *, as_digest: str | None = None) -> str:
        digest = as_digest or hashlib.sha256(data).hexdigest()
        self.objects[digest] = data
        return digest

    def fetch_artifact(self, target: Any, digest: str, *, max_bytes: int) -> bytes:
        with self._lock:
            self.fetches.append(digest)
            self.targets.append(target)
        if digest not in self.objects:
            raise LookupError("status 404")
        return self.objects[digest][:max_bytes]


def fake_target(_session: Any, *, connection_id: str, settings: Any) -> str:
    """A target resolver for fakes: the target is just the connection id."""
    return f"target:{connection_id}"


class LoopbackArtifactProvider:
    """A real provider on 127.0.0.1: every execution succeeds with a manifest of `objects`,
    and `GET /v1/artifacts/{digest}` serves `served[digest]` (the true bytes unless a test
    swaps them) with the connection credential. Counts every artifact fetch."""

    def __init__(self, objects: Mapping[str, bytes], *, credential: str) -> None:
        self.manifest = [entry(data, artifact_id) for artifact_id, data in objects.items()]
        self.served = {hashlib.sha256(data).hexdigest(): data for data in objects.values()}
        self.fetches: list[str] = []
        self.credential = credential
        self._outcomes: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = serve_in_thread(self._server, "artifact-provider")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        stop_server(self._server, self._thread)

    def _execute(self, key: str) -> bytes:
        with self._lock:
            return self._outcomes.setdefault(
                key,
                json.dumps(
                    {
                        "outcome": "SUCCEEDED",
                        "correlationId": f"corr-{len(self._outcomes)}",
                        "result": {"artifacts": self.manifest},
                    }
                ).encode(),
            )

    def _artifact(self, digest: str) -> bytes | None:
        with self._lock:
            self.fetches.append(digest)
            return self.served.get(digest)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, media_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {provider.credential}"

            def do_GET(self) -> None:
                if not self._authorized():
                    self._send(401, b"{}", "application/json")
                    return
                body = provider._artifact(self.path.removeprefix("/v1/artifacts/"))
                if body is None:
                    self._send(404, b"{}", "application/json")
                else:
                    self._send(200, body, "application/octet-stream")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self._authorized() or self.path != "/v1/executions":
                    self._send(401, b"{}", "application/json")
                    return
                answer = provider._execute(self.headers.get("Idempotency-Key", ""))
                self._send(200, answer, "application/json")

        return Handler
