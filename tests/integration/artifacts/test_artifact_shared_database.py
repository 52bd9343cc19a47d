"""Several hosts on one PostgreSQL: the database blob store makes every artifact visible to all."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_api_key
from builders.artifacts import FakeFetcher, fake_target, settled_call
from mercato.artifacts import flows
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app

pytestmark = pytest.mark.postgres_only


def _host(settings: Settings, data_dir: Path) -> Runtime:
    """A separate process's view: its own engine and its own (unshared) data directory."""
    return Runtime.from_settings(
        settings.model_copy(update={"blob_store": "database", "data_dir": data_dir})
    )


@pytest.fixture
def hosts(settings: Settings, tmp_path: Path) -> Iterator[tuple[Runtime, Runtime]]:
    first, second = _host(settings, tmp_path / "host-a"), _host(settings, tmp_path / "host-b")
    yield first, second
    first.db.dispose()
    second.db.dispose()


def test_an_artifact_ingested_on_one_host_downloads_from_another(
    hosts: tuple[Runtime, Runtime],
) -> None:
    worker_host, api_host = hosts
    data = b"shared chart " * 1000
    account_id, call = settled_call(worker_host, {"chart": data})
    fetcher = FakeFetcher()
    fetcher.serve(data)

    assert flows.ingest_once(worker_host, fetcher, resolve_target=fake_target) == 1

    key, _ = make_api_key(api_host.db, account_id)
    with TestClient(create_app(api_host), raise_server_exceptions=False) as client:
        response = client.get(f"/v1/invocations/{call}/artifacts/chart", headers=bearer(key))
    assert response.status_code == 200
    assert response.content == data
    assert hashlib.sha256(response.content).hexdigest() == response.headers["etag"].strip('"')
    for host in hosts:
        assert not (host.settings.data_dir / "blobs").exists()


def test_workers_on_two_hosts_fetch_each_artifact_once(hosts: tuple[Runtime, Runtime]) -> None:
    objects = {f"a{i}": f"artifact {i}".encode() * 100 for i in range(10)}
    settled_call(hosts[0], objects)
    fetchers = [FakeFetcher(), FakeFetcher()]
    for fetcher in fetchers:
        for data in objects.values():
            fetcher.serve(data)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(host: Runtime, fetcher: FakeFetcher) -> None:
        try:
            barrier.wait(timeout=10)
            while flows.ingest_once(host, fetcher, resolve_target=fake_target, limit=2):
                pass
        except BaseException as exc:
            errors.append(exc)

    pairs = zip(hosts, fetchers, strict=True)
    threads = [threading.Thread(target=work, args=pair) for pair in pairs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    fetched = fetchers[0].fetches + fetchers[1].fetches
    assert sorted(fetched) == sorted(hashlib.sha256(d).hexdigest() for d in objects.values())
