"""Import strings for ASGI servers: `mercato.web.asgi:create_app_from_env` (a factory, use
uvicorn's `--factory`) or `mercato.web.asgi:app` (built on first access). Both read the
`MERCATO_*` settings of the process and log JSON lines; `mercato serve --workers N` uses the
factory in each worker process.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from mercato.core.logs import configure_logging
from mercato.db.runtime import Runtime
from mercato.settings import load_settings
from mercato.web.app import create_app

_built: dict[str, FastAPI] = {}


def create_app_from_env() -> FastAPI:
    """Configure JSON logging and build the app from the environment's settings."""
    configure_logging()
    return create_app(Runtime.from_settings(load_settings()))


def __getattr__(name: str) -> Any:
    if name == "app":
        if "app" not in _built:
            _built["app"] = create_app_from_env()
        return _built["app"]
    raise AttributeError(name)
