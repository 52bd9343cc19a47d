"""`mercato migrate` and `mercato serve`."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from sqlalchemy import Engine

from mercato.cli.framework import WholeNumber, command
from mercato.db import models
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.settings import Settings, load_settings

if TYPE_CHECKING:
    from alembic.script import Script

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def register(top: click.Group, _admin: click.Group) -> None:
    top.add_command(cmd_migrate)
    top.add_command(cmd_serve)
    top.add_command(cmd_openapi)


def runtime_from_env(
    client: Callable[[Settings], ProviderClient] = ProviderClient,
) -> Runtime:
    """The command's Runtime, built once from the `MERCATO_*` settings (a provider client is
    made but opens no connection until a command calls a provider).

    Every domain's models are loaded first: a command imports only its own module (decision
    0391), and a flush resolves foreign keys to tables its module may not import."""
    models.load_all()
    return Runtime.from_settings(load_settings()).ensure_provider(client)


@command("migrate", help="create or upgrade the database schema")
def cmd_migrate() -> int:
    from mercato.db.migrate import current_revision, upgrade  # Alembic: only where it migrates

    # Alembic's own INFO lines ("Context impl", "Running upgrade a -> b") are for its authors;
    # a person gets one line per migration below.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    runtime = runtime_from_env()
    engine = runtime.db.engine
    pending = pending_revisions(engine)
    for revision in pending:  # one at a time: each runs in its own transaction anyway
        upgrade(engine, revision.revision)
        print(f"applied {revision.revision}: {_plain_words(revision.doc)}", flush=True)
    upgrade(engine)  # nothing is left, unless the history branches: then Alembic says so
    head = current_revision(engine)
    print(f"migrated to {head}" if pending else f"already up to date ({head})")
    return 0


# "(decision 0186)", "(DESIGN §7, decision 0510)", ", decision 0371", "(decisions 0200-0202)"
_DECISION_REFERENCE = r"\s*\((?:[^()]*\b)?decisions?\b[^()]*\)|,? decisions? [\d, -]+"


def _plain_words(doc: str | None) -> str:
    """A migration's first sentence, without its decision references."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    sentence = paragraph.split(". ")[0].rstrip(".")
    sentence = re.sub(_DECISION_REFERENCE, "", sentence)
    return sentence.strip() or "(no description)"


def pending_revisions(engine: Engine) -> list[Script]:
    """The revisions `upgrade` would apply, oldest first ([] when the history branches)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import Script, ScriptDirectory

    from mercato.db.migrate import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config(engine))
    if len(scripts.get_heads()) != 1:
        return []
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    pending = [
        s for s in scripts.iterate_revisions("head", current or "base") if isinstance(s, Script)
    ]
    return list(reversed(pending))


@command("openapi", help="print the caller API's OpenAPI document (docs/openapi.json)")
def cmd_openapi() -> int:
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
        # Connection limits (docs/decisions/0182-serve-connection-limits.md): the httptools
        # parser with a bounded request head (decision 0380: a head over 64 KiB is answered 431,
        # never buffered); idle keep-alive connections are closed after 5 s; slow clients only
        # hold their own connection.
        "http": "mercato.web.http:BoundedHttpToolsProtocol",
        "timeout_keep_alive": 5,
        # On SIGTERM, in-flight requests get their provider call's time to finish; a client
        # stalled mid-request cannot hold the shutdown open for ever.
        "timeout_graceful_shutdown": int(settings.provider_timeout_seconds) + 5,
    }


@command("serve", help="run the platform API and web")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=WholeNumber(0, 65535), default=8000, show_default=True)
@click.option(
    "--workers",
    type=WholeNumber(1, 1024),
    default=1,
    show_default=True,
    help="worker processes sharing the port (metrics are aggregated across them)",
)
def cmd_serve(host: str, port: int, workers: int) -> int:
    import uvicorn

    from mercato.core.logs import configure_logging

    settings = load_settings()  # fail closed here, before any worker starts
    configure_logging()
    common = server_options(settings, host=host, port=port)
    if workers == 1:
        from mercato.web.app import create_app

        uvicorn.run(create_app(Runtime.from_settings(settings), server=True), **common)
        return 0
    if not settings.prometheus_multiproc_dir:
        # Set before the worker processes start (and import prometheus_client).
        os.environ[MULTIPROC_ENV] = str(metrics_dir(settings.data_dir, port))
    # Each worker on a listening socket of its own, so the kernel spreads connections among
    # them (decision 0465).
    from mercato.cli.serving import run_workers

    run_workers("mercato.web.asgi:create_app_from_env", workers, factory=True, **common)
    return 0
