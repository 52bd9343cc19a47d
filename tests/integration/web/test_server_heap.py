"""A server process's garbage collector (decision 0415): once the app has started, the start-up
heap is frozen and the youngest generation's threshold raised, for as long as it serves; an
app built without `server=True` (every test's) leaves the collector alone. `mercato serve` and
`mercato.web.asgi` build the server's app."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mercato.cli.main import main
from mercato.db.runtime import Runtime
from mercato.web import asgi
from mercato.web.app import YOUNG_COLLECTION_THRESHOLD, create_app


@pytest.fixture
def collector() -> Iterator[tuple[int, int, int]]:
    """The collector as the test found it (unfrozen), restored whatever the test did."""
    gc.unfreeze()
    threshold = gc.get_threshold()
    assert threshold[0] != YOUNG_COLLECTION_THRESHOLD
    yield threshold
    gc.unfreeze()
    gc.set_threshold(*threshold)


def _while_serving(app: FastAPI) -> tuple[int, tuple[int, int, int]]:
    """The frozen object count and the thresholds while `app` serves (its lifespan running)."""
    with TestClient(app) as client:
        assert client.get("/health/live").status_code == 200
        return gc.get_freeze_count(), gc.get_threshold()


def test_a_server_app_freezes_its_start_up_heap_while_it_serves(
    runtime: Runtime, collector: tuple[int, int, int]
) -> None:
    frozen, threshold = _while_serving(create_app(runtime, server=True))
    assert frozen > 10_000  # modules, the app, the runtime: the start-up heap
    assert threshold == (YOUNG_COLLECTION_THRESHOLD, *collector[1:])
    # Once stopped, the collector is as it was.
    assert (gc.get_freeze_count(), gc.get_threshold()) == (0, collector)


def test_an_app_built_for_a_test_leaves_the_collector_alone(
    runtime: Runtime, collector: tuple[int, int, int]
) -> None:
    assert _while_serving(create_app(runtime)) == (0, collector)


def _point_at(monkeypatch: pytest.MonkeyPatch, runtime: Runtime, data_dir: Path) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", runtime.settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(data_dir))


def test_mercato_serve_and_the_asgi_factory_build_a_server_app(
    runtime: Runtime,
    collector: tuple[int, int, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import uvicorn

    import mercato.core.logs

    _point_at(monkeypatch, runtime, tmp_path / "serve")
    # The test process keeps its own log handlers.
    monkeypatch.setattr(mercato.core.logs, "configure_logging", lambda: None)
    monkeypatch.setattr(asgi, "configure_logging", lambda: None)
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_options: served.append(app))

    assert main(["serve", "--workers", "1"]) == 0
    (app,) = served
    apps = [app, asgi.create_app_from_env()]
    for app in apps:
        frozen, threshold = _while_serving(app)
        assert frozen > 10_000 and threshold[0] == YOUNG_COLLECTION_THRESHOLD
        assert (gc.get_freeze_count(), gc.get_threshold()) == (0, collector)
        app.state.runtime.db.dispose()
