"""Ingestion against a real provider process on 127.0.0.1, then download through the app."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.artifacts import entry, make_invocation
from mercato.artifacts import flows, service
from mercato.artifacts.store import open_blob_store
from mercato.core.clock import FakeClock
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.providers import service as providers
from mercato.web.app import create_app

pytestmark = pytest.mark.functional

SCRIPT = Path(__file__).with_name("artifact_provider.py")
CREDENTIAL = "artifact-credential-0123456789abcdef"
CHART = b"\x89PNG\r\n\x1a\n" + os.urandom(4096)
TABLE = b"rank,title\n1,first\n2,second\n"


@dataclass
class Provider:
    base_url: str
    objects: Path
    log: Path

    def publish(self, data: bytes, *, as_digest: str | None = None) -> str:
        digest = as_digest or hashlib.sha256(data).hexdigest()
        (self.objects / digest).write_bytes(data)
        return digest

    def requests(self) -> list[tuple[str, str, str]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [(s, p, ok) for s, p, ok in (line.split(" ") for line in lines)]


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    objects = tmp_path / "provider-objects"
    objects.mkdir()
    log = tmp_path / "provider-requests.log"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(objects), str(log)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ARTIFACT_CREDENTIAL": CREDENTIAL},
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield Provider(base_url=f"http://127.0.0.1:{port}", objects=objects, log=log)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(params=["local", "database"])
def platform(request: pytest.FixtureRequest, runtime: Runtime) -> Runtime:
    settings = runtime.settings.model_copy(update={"blob_store": request.param})
    return Runtime(settings=settings, db=runtime.db, clock=FakeClock())


def _connection(runtime: Runtime, base_url: str, credential: str = CREDENTIAL) -> str:
    owner = make_account(runtime.db, "provider@example.com")
    with runtime.db.transaction() as session:
        connection = providers.create_connection(
            session,
            owner_id=owner,
            name="charts",
            base_url=base_url,
            credential=credential,
            settings=runtime.settings,
            now=runtime.clock.now(),
        )
        return connection.id


def _state(runtime: Runtime, call: str) -> dict[str, tuple[bool, str | None]]:
    with runtime.db.read() as session:
        return {
            a.entry.artifact_id: (a.ingested, a.last_error)
            for a in service.list_for_invocation(session, invocation_id=call)
        }


def test_ingestion_pulls_verifies_and_serves_real_provider_bytes(
    platform: Runtime, provider: Provider
) -> None:
    connection_id = _connection(platform, provider.base_url)
    caller = make_account(platform.db, "caller@example.com")
    call = make_invocation(
        platform,
        account_id=caller,
        connection_id=connection_id,
        manifest=[entry(CHART, "chart"), entry(TABLE, "table", "text/csv")],
    )
    chart_digest = provider.publish(CHART)
    # The provider answers the table's digest with other bytes: they must not be stored.
    table_digest = provider.publish(TABLE.upper(), as_digest=hashlib.sha256(TABLE).hexdigest())
    client = ProviderClient(platform.settings)

    handled = flows.ingest_once(platform, client, resolve_target=providers.get_dispatch_target)

    assert handled == 2
    state = _state(platform, call)
    assert state["chart"] == (True, None)
    assert state["table"][0] is False
    assert state["table"][1] is not None and "digest" in state["table"][1]
    store = open_blob_store(platform)
    assert store.read(chart_digest) == CHART
    assert not store.exists(table_digest)
    assert sorted(provider.requests()) == sorted(
        [
            ("200", f"/v1/artifacts/{chart_digest}", "True"),
            ("200", f"/v1/artifacts/{table_digest}", "True"),
        ]
    )

    provider.publish(TABLE)
    platform.clock.advance(7200)  # type: ignore[attr-defined]
    assert flows.ingest_once(platform, client, resolve_target=providers.get_dispatch_target) == 1
    assert _state(platform, call)["table"] == (True, None)
    assert len(provider.requests()) == 3  # the chart, already stored, was not fetched again

    key, _ = make_api_key(platform.db, caller)
    with TestClient(create_app(platform), raise_server_exceptions=False) as http:
        chart = http.get(f"/v1/invocations/{call}/artifacts/chart", headers=bearer(key))
        table = http.get(f"/v1/invocations/{call}/artifacts/table", headers=bearer(key))
    assert (chart.status_code, chart.content) == (200, CHART)
    assert (table.status_code, table.content) == (200, TABLE)
    assert table.headers["content-type"] == "text/csv"


def test_a_wrong_connection_credential_stores_nothing(
    platform: Runtime, provider: Provider
) -> None:
    wrong = "wrong-credential-0123456789"
    connection_id = _connection(platform, provider.base_url, credential=wrong)
    caller = make_account(platform.db, "caller@example.com")
    call = make_invocation(
        platform, account_id=caller, connection_id=connection_id, manifest=[entry(CHART, "chart")]
    )
    digest = provider.publish(CHART)

    flows.ingest_once(
        platform, ProviderClient(platform.settings), resolve_target=providers.get_dispatch_target
    )

    ingested, error = _state(platform, call)["chart"]
    assert ingested is False
    assert error is not None and "401" in error
    assert "wrong-credential" not in error
    assert not open_blob_store(platform).exists(digest)
    assert provider.requests() == [("401", f"/v1/artifacts/{digest}", "False")]
