"""FastAPI's native OpenTelemetry is off in the product app (decision 0495): no per-request
provider check, and still the same 500 for an exception out of a route."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry import _logs, metrics, trace
from starlette.middleware.errors import ServerErrorMiddleware

from mercato.db.runtime import Runtime
from mercato.web.app import TELEMETRY_OFF, MercatoApp, create_app


def _layers(app: Any) -> list[type]:
    layers: list[type] = []
    seen: set[int] = set()
    while app is not None and id(app) not in seen:
        seen.add(id(app))
        layers.append(type(app))
        app = getattr(app, "app", None)
    return layers


def test_the_product_app_is_built_with_telemetry_off(runtime: Runtime) -> None:
    app = create_app(runtime)
    assert isinstance(app, MercatoApp)
    for signal in ("tracing", "metrics", "logs", "operation_spans", "auto_configure"):
        assert TELEMETRY_OFF[signal] is False  # type: ignore[literal-required]
        assert app._telemetry[signal] is False  # type: ignore[literal-required]
    layers = _layers(app.build_middleware_stack())
    assert layers[0] is ServerErrorMiddleware


class _Configured:
    """Stands for an SDK provider: anything but the API's deferred proxies counts as
    configured for FastAPI."""


def test_a_configured_provider_does_not_turn_it_on(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(runtime)
    monkeypatch.setattr(trace, "get_tracer_provider", _Configured)
    monkeypatch.setattr(metrics, "get_meter_provider", _Configured)
    monkeypatch.setattr(_logs, "get_logger_provider", _Configured)
    assert app._native_telemetry.enabled() is False
    # A stock FastAPI app would trace with such providers: the check above is the switch.
    assert MercatoApp.__mro__[1]()._native_telemetry.enabled() is True


def test_no_request_is_marked_for_telemetry(runtime: Runtime) -> None:
    app = create_app(runtime)
    scopes: list[dict[str, Any]] = []

    @app.get("/_probe")
    async def probe() -> dict[str, bool]:
        return {"ok": True}

    inner = app.build_middleware_stack

    def recording() -> Any:
        stack = inner()

        async def outer(scope: Any, receive: Any, send: Any) -> None:
            scopes.append(scope)
            await stack(scope, receive, send)

        return outer

    app.build_middleware_stack = recording  # type: ignore[method-assign]
    with TestClient(app) as client:
        assert client.get("/_probe").status_code == 200
    (scope,) = [s for s in scopes if s["type"] == "http"]
    assert "fastapi.telemetry" not in scope


def test_an_exception_out_of_a_route_is_still_the_500_problem(runtime: Runtime) -> None:
    app = create_app(runtime)

    @app.get("/_boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/_boom")
    assert answer.status_code == 500
    assert answer.headers["content-type"].startswith("application/problem+json")
