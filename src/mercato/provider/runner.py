"""Serve a provider app with uvicorn."""

from __future__ import annotations

import uvicorn
from starlette.types import ASGIApp


def serve_provider(
    app: ASGIApp, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info"
) -> None:
    """Run `app` until interrupted; uvicorn runs the app's startup recovery first."""
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
