"""Import strings for ASGI servers: `mercato.web.asgi:create_app_from_env` (a factory, use
uvicorn's `--factory`) or `mercato.web.asgi:app` (built on first access). Both read the
`MERCATO_*` settings of the process and log JSON lines; `mercato serve --workers N` uses the
factory in each worker process.
"""

from __future__ import annotations

import sys
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError

from mercato.core.logs import configure_logging
from mercato.db.runtime import Runtime
from mercato.settings import SettingsError, describe_settings_error, load_settings
from mercato.web.app import create_app

_built: dict[str, FastAPI] = {}


def create_app_from_env() -> FastAPI:
    """Configure JSON logging and build the app from the environment's settings (the app of a
    server process: `create_app(..., server=True)`)."""
    configure_logging()
    try:
        settings = load_settings()
    except (SettingsError, ValidationError) as exc:
        # One line and exit 2, as from `mercato serve` (the server's loader would print a
        # traceback for any Exception; SystemExit passes through it).
        sys.stderr.write(f"configuration error: {describe_settings_error(exc)}\n")
        raise SystemExit(2) from None
    return create_app(Runtime.from_settings(settings), server=True)


def __getattr__(name: str) -> Any:
    if name == "app":
        if "app" not in _built:
            _built["app"] = create_app_from_env()
        return _built["app"]
    raise AttributeError(name)
