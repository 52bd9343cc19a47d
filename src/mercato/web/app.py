"""The ASGI application factory: caller API under /v1, marketplace pages under /."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from typing import Any

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from starlette.routing import Route
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from mercato.db.runtime import Runtime
from mercato.dispatch.observed import AsyncObservedProviderClient, ObservedProviderClient
from mercato.dispatch.port import PerLoopProvider
from mercato.web import observe, openapi, pages, problems
from mercato.web.api import invocations, routers
from mercato.web.direct import route_of
from mercato.web.front import Front
from mercato.web.mcp.endpoint import PATH as MCP_PATH
from mercato.web.mcp.endpoint import McpEndpoint

YOUNG_COLLECTION_THRESHOLD = 10_000
"""A server's `gc` threshold for its youngest generation (Python's default is 700)."""


TELEMETRY_OFF: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}
"""FastAPI's native OpenTelemetry, switched off by its own constructor argument (decision 0495):
Mercato's metrics are its Prometheus series and its logs its JSON lines."""


class MercatoApp(FastAPI):
    """FastAPI with its native telemetry off (`TELEMETRY_OFF`, decision 0495): no provider
    lookups on every request to ask whether OpenTelemetry is configured."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(telemetry=TELEMETRY_OFF, **kwargs)


@contextmanager
def server_heap() -> Iterator[None]:
    """The garbage collector of a server process, for as long as it serves (decision 0415).

    The heap built at start-up (modules, the app, the runtime, the provider client) is
    collected once and frozen (`gc.freeze()`): full collections walk only what was made since,
    not some 170,000 start-up objects (about 100 ms of CPU each, one every 1,000-2,500 invokes
    at 64 clients). The youngest generation is collected after 10,000 net allocations instead
    of 700: the objects of requests in flight (64 at once) swing by more than 700, so every
    few invokes a collection walked them and promoted them to older generations, to be walked
    again there, while the garbage they leave is freed by reference counting. Both are undone
    at shutdown."""
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def create_app(runtime: Runtime, *, server: bool = False) -> FastAPI:
    """Build the app around its Runtime, the process's composition root (db/runtime.py).

    `server`: the app of a server process (`mercato serve`, `mercato.web.asgi`), whose garbage
    collector is set up for serving once the app has started (`server_heap`).

    A runtime built without a provider client gets the observed one here, once. One without
    an async provider client (the invoke path's) gets the observed async one: made at start-up
    on the serving loop (an aiohttp session belongs to the loop it was opened on), reused by
    every call, closed at shutdown (`mercato.dispatch.port.PerLoopProvider`). A client the
    runtime already carries belongs to whoever built it, who closes it.
    """
    owned: PerLoopProvider | None = None
    if runtime.async_provider is None:
        settings = runtime.settings
        owned = PerLoopProvider(lambda: AsyncObservedProviderClient(settings))
        runtime.async_provider = owned

    mcp = McpEndpoint(runtime)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if owned is not None:
            await owned.open()
        try:
            async with mcp.running():
                with server_heap() if server else nullcontext():
                    yield
        finally:
            if owned is not None:
                await owned.aclose()

    app = MercatoApp(
        title="Mercato", version="1.0.0", docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.runtime = runtime.ensure_provider(ObservedProviderClient)
    problems.install(app)
    for router in routers():
        app.include_router(router)
    pages.install(app)
    # The Model Context Protocol (DESIGN §12): an ASGI app of the `mcp` SDK behind the caller's
    # authentication, on every method (the SDK answers the ones it does not serve). First, so
    # that the router does not try every other route's pattern on each tool call first.
    app.router.routes.insert(0, Route(MCP_PATH, endpoint=mcp, include_in_schema=False))
    # One layer (web/front.py, decision 0382): request ids, log line and counters
    # (web/observe.py), body caps (web/limits.py), one Authorization header and no U+0000
    # (web/edge.py), then the invoke route served directly (web/direct.py, decision 0381).
    app.add_middleware(
        Front, route=route_of(app.routes, invocations.invoke), ids=app.state.runtime.ids
    )
    observe.install(app)  # /metrics
    openapi.install(app)  # /v1/openapi.json and /v1/docs, generated from the routes
    # Outermost: the client address everything else sees is the peer's, or the forwarded one
    # only when the peer is a configured trusted proxy (decision 0221).
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=runtime.settings.trusted_proxy_list)
    return app
