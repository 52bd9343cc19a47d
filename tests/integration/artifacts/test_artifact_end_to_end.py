"""Invoke an artifact-producing version, let the worker ingest, download: the whole path."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.catalog import approve_connection, example_contract, publish
from builders.event_loops import run_on_fresh_loop
from builders.servers import serve_in_thread, stop_server
from mercato.core.clock import FakeClock, utcnow
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.worker import loops

CREDENTIAL = "chart-credential-0123456789abcdef"
CHART = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64
CHART_DIGEST = hashlib.sha256(CHART).hexdigest()


class ChartProvider:
    """A correct provider whose every execution returns one PNG artifact it also serves."""

    def __init__(self) -> None:
        self.artifact_fetches: Counter[str] = Counter()
        self.results: dict[str, bytes] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = serve_in_thread(self._server, "chart-provider")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        stop_server(self._server, self._thread)

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
                return self.headers.get("Authorization") == f"Bearer {CREDENTIAL}"

            def do_GET(self) -> None:
                if not self.path.startswith("/v1/artifacts/"):
                    self._send(200, b'{"status":"ok"}', "application/json")
                elif not self._authorized():
                    self._send(401, b"", "application/json")
                elif self.path == f"/v1/artifacts/{CHART_DIGEST}":
                    provider.artifact_fetches[CHART_DIGEST] += 1
                    self._send(200, CHART, "image/png")
                else:
                    self._send(404, b"", "application/json")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self._authorized():
                    self._send(401, b"{}", "application/json")
                    return
                key = self.headers.get("Idempotency-Key", "")
                if self.path == "/v1/executions":
                    payload = json.loads(body)["payload"]
                    manifest = [
                        {
                            "artifactId": "chart",
                            "digest": CHART_DIGEST,
                            "mediaType": "image/png",
                            "size": len(CHART),
                        }
                    ]
                    answer = json.dumps(
                        {
                            "outcome": "SUCCEEDED",
                            "correlationId": "corr-1",
                            "result": {"chart": payload.get("chart"), "artifacts": manifest},
                        }
                    ).encode()
                    provider.results.setdefault(key, answer)
                    self._send(200, provider.results[key], "application/json")
                else:
                    self._send(404, b"{}", "application/json")

        return Handler


@pytest.fixture
def chart_provider() -> Iterator[ChartProvider]:
    provider = ChartProvider()
    yield provider
    provider.stop()


@pytest.fixture(params=["local", "database"])
def platform(request: pytest.FixtureRequest, db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    settings = Settings(
        env="dev", data_dir=tmp_path / "data", database_url=db_url, blob_store=request.param
    )
    runtime = Runtime.from_settings(settings, clock=FakeClock(utcnow()))
    yield runtime
    runtime.db.dispose()


def _publish_chart_service(runtime: Runtime, provider_url: str) -> None:
    owner = make_account(runtime.db, "provider@example.com", password=None)
    with runtime.db.transaction() as session:
        connection = providers.create_connection(
            session,
            owner_id=owner,
            name="charts",
            base_url=provider_url,
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
        connection_id = connection.id
    approve_connection(runtime, connection_id)
    contract = example_contract()
    publish(runtime, connection_id, service_code="acme.charts", price=10, contract=contract)


def test_invoke_then_worker_ingests_then_owner_downloads(
    platform: Runtime, chart_provider: ChartProvider
) -> None:
    _publish_chart_service(platform, chart_provider.url)
    caller = make_account(platform.db, "caller@example.com", password=None)
    with platform.db.transaction() as session:
        ledger.grant(session, account_id=caller, amount=100, now=platform.clock.now())
    key, _ = make_api_key(platform.db, caller)
    provider_client = ProviderClient(platform.settings)
    app = create_app(dataclasses.replace(platform, provider=provider_client))

    with TestClient(app, raise_server_exceptions=False) as http:
        invoked = http.post(
            "/v1/services/acme.charts/versions/v1:invoke",
            json={"chart": "overall"},
            headers={**bearer(key), "Idempotency-Key": "charts-1"},
        )
        assert invoked.status_code == 200, invoked.text
        body = invoked.json()
        call = body["invocationId"]
        assert body["artifacts"] == [
            {
                "artifactId": "chart",
                "digest": CHART_DIGEST,
                "mediaType": "image/png",
                "size": len(CHART),
            }
        ]
        path = f"/v1/invocations/{call}/artifacts/chart"
        before = http.get(path, headers=bearer(key))
        assert before.status_code in {200, 503}, before.text
        if before.status_code == 503:  # not pulled synchronously: the worker does it
            assert before.json()["code"] == "ARTIFACT_NOT_READY"
            platform.clock.advance(1)  # type: ignore[attr-defined]
            worker = dataclasses.replace(platform, provider=provider_client)
            assert run_on_fresh_loop(loops.run_once(worker)) >= 1

        downloaded = http.get(path, headers=bearer(key))
        assert downloaded.status_code == 200, downloaded.text
        assert downloaded.content == CHART
        assert downloaded.headers["etag"] == f'"{CHART_DIGEST}"'

        stranger = make_account(platform.db, "stranger@example.com", password=None)
        stranger_key, _ = make_api_key(platform.db, stranger)
        assert http.get(path, headers=bearer(stranger_key)).status_code == 404

    assert chart_provider.artifact_fetches[CHART_DIGEST] == 1
