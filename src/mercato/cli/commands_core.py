"""`mercato migrate` and `mercato serve`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.settings import Settings, load_settings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def register(top: Any, _admin: Any) -> None:
    migrate = top.add_parser("migrate", help="create or upgrade the database schema")
    migrate.set_defaults(handler=cmd_migrate)
    serve = top.add_parser("serve", help="run the platform API and web")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes sharing the port (metrics are aggregated across them)",
    )
    serve.set_defaults(handler=cmd_serve)
    openapi = top.add_parser(
        "openapi", help="print the caller API's OpenAPI document (docs/openapi.json)"
    )
    openapi.set_defaults(handler=cmd_openapi)


def runtime_from_env(
    client: Callable[[Settings], ProviderClient] = ProviderClient,
) -> Runtime:
    """The command's Runtime, built once from the `MERCATO_*` settings (a provider client is
    made but opens no connection until a command calls a provider)."""
    return Runtime.from_settings(load_settings()).ensure_provider(client)


def cmd_migrate(_args: argparse.Namespace) -> int:
    from mercato.db.migrate import upgrade  # Alembic: loaded only by the commands that migrate

    runtime = runtime_from_env()
    upgrade(runtime.db.engine)
    print("schema is up to date")
    return 0


def cmd_openapi(_args: argparse.Namespace) -> int:
    """`mercato openapi > docs/openapi.json`: the document `/v1/openapi.json` serves."""
    from mercato.web.export import main

    return main()


def metrics_dir(data_dir: Path, port: int) -> Path:
    """A fresh prometheus_client multiprocess directory for one `serve --workers N` run."""
    directory = data_dir.resolve() / "metrics" / f"serve-{port}"
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    return directory


def server_options(settings: Settings, *, host: str, port: int) -> dict[str, Any]:
    """The uvicorn options of `mercato serve` (also used by the crash suite's test entry)."""
    return {
        "host": host,
        "port": port,
        "log_config": None,
        "access_log": False,
        "server_header": False,
        # The app believes X-Forwarded-* from MERCATO_TRUSTED_PROXIES only (decision 0221).
        "proxy_headers": False,
        # Connection limits (docs/decisions/0182-serve-connection-limits.md): h11 answers an
        # oversized request head with 431 instead of buffering it; idle keep-alive connections
        # are closed after 5 s; slow clients only hold their own connection.
        "http": "h11",
        "h11_max_incomplete_event_size": 64 * 1024,
        "timeout_keep_alive": 5,
        # On SIGTERM, in-flight requests get their provider call's time to finish; a client
        # stalled mid-request cannot hold the shutdown open for ever.
        "timeout_graceful_shutdown": int(settings.provider_timeout_seconds) + 5,
    }


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from mercato.core.logs import configure_logging

    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    settings = load_settings()  # fail closed here, before any worker starts
    configure_logging()
    common = server_options(settings, host=args.host, port=args.port)
    if args.workers == 1:
        from mercato.web.app import create_app

        uvicorn.run(create_app(Runtime.from_settings(settings)), **common)
        return 0
    if not settings.prometheus_multiproc_dir:
        # Set before the worker processes start (and import prometheus_client).
        os.environ[MULTIPROC_ENV] = str(metrics_dir(settings.data_dir, args.port))
    uvicorn.run(
        "mercato.web.asgi:create_app_from_env", factory=True, workers=args.workers, **common
    )
    return 0
