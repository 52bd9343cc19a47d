"""The measured floor (issue 20): the leanest invoke this machine serves on the product's engine.

One plain Starlette route, no FastAPI, no middleware (no request ids, metrics, access log, edge
checks or body limits), uvicorn with its fastest parser, and behind it exactly the engine
`mercato serve` runs: the API-key lookup, the key and facts reads, the accept program, the
async provider client with its guard, the settle program (`flows.invoke_call` on
`runtime.adb`). What it costs is what the engine costs; what `mercato serve` costs on top of
it is the web layer. Only the success answer is written out (the benchmark sends valid calls;
anything else is a 500, counted as such). Never a product entry point.

    python -m bench.floor --port N   (the platform's MERCATO_* environment)
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mercato.cli.serving import run_workers
from mercato.db.runtime import Runtime
from mercato.dispatch.async_client import AsyncProviderClient
from mercato.dispatch.port import PerLoopProvider
from mercato.invocations import flows
from mercato.settings import load_settings
from mercato.web.deps import bearer_token

PATH = "/v1/services/{service_code}/versions/{version}:invoke"


def create_app() -> Starlette:
    settings = load_settings()
    runtime = Runtime.from_settings(settings)
    runtime.async_provider = PerLoopProvider(lambda: AsyncProviderClient(settings))

    async def invoke(request: Request) -> Response:
        body = await request.body()
        call = flows.Call(
            bearer_token(request),
            request.headers.getlist("idempotency-key"),
            request.path_params["service_code"],
            request.path_params["version"],
            body,
        )
        result = await flows.invoke_call(runtime, call)
        if result.view.state != "SUCCEEDED":
            return Response(b"", status_code=500)
        return Response(orjson.dumps(result.view.success_body()), media_type="application/json")

    async def live(_request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    routes = [Route(PATH, invoke, methods=["POST"]), Route("/health/live", live)]
    app = Starlette(routes=routes)
    app.state.runtime = runtime
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    options: dict[str, Any] = {
        "factory": True,
        "host": "127.0.0.1",
        "port": args.port,
        "log_level": "warning",
        "access_log": False,
    }
    if args.workers == 1:
        uvicorn.run("bench.floor:create_app", **options)
        return
    # Each worker on a listening socket of its own, as `mercato serve` (decision 0465).
    run_workers("bench.floor:create_app", args.workers, **options)


if __name__ == "__main__":
    main()
