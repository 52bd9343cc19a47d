"""Run one simulation on a fresh database and render its verdict."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from mercato.db.engine import make_engine
from mercato.db.migrate import upgrade
from mercato.db.models import load_all
from support.simulation.harness import Simulation, Verdict

COMMAND = "python tests/simulate.py"


def run_simulation(
    *,
    seed: int,
    steps: int,
    database_url: str | None = None,
    bug: str | None = None,
    quiesce_every: int = 250,
) -> Verdict:
    """Simulate `steps` steps from `seed` on a fresh, migrated database.

    Without `database_url`: a temporary SQLite file. A PostgreSQL URL names the server (and a
    database to connect to while creating one): a scratch database is created next to it and
    dropped afterwards. A SQLite URL must name a file that does not exist yet.
    """
    load_all()
    with (
        tempfile.TemporaryDirectory(prefix="mercato-sim-") as tmp,
        _fresh_database(database_url, Path(tmp)) as url,
    ):
        simulation = Simulation(
            seed=seed, steps=steps, database_url=url, data_dir=Path(tmp) / "data", bug=bug
        )
        return simulation.run(quiesce_every=quiesce_every)


@contextmanager
def _fresh_database(database_url: str | None, tmp: Path) -> Iterator[str]:
    if database_url is None:
        database_url = f"sqlite:///{tmp / 'simulation.db'}"
    if database_url.startswith("sqlite"):
        path = make_url(database_url).database
        if path and Path(path).exists():
            raise SystemExit(f"refusing to simulate on an existing SQLite file: {path}")
        _migrate(database_url)
        yield database_url
        return
    url = database_url
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            url = "postgresql+psycopg://" + url.removeprefix(prefix)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    name = f"mercato_sim_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    scratch = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:
        _migrate(scratch)
        yield scratch
    finally:
        with admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def reproduce_command(verdict: Verdict, database_url: str | None) -> str:
    parts = [COMMAND, f"--seed {verdict.seed}", f"--steps {verdict.steps}"]
    if database_url:
        parts.append("--database-url URL")
    if verdict.bug:
        parts.append(f"--inject-bug {verdict.bug}")
    return " ".join(parts)


def summary(verdict: Verdict) -> dict[str, Any]:
    """The verdict as one JSON object (`--json`)."""
    first = verdict.violations[0] if verdict.violations else None
    return {
        "seed": verdict.seed,
        "steps": verdict.steps,
        "stepsRun": verdict.steps_run,
        "backend": verdict.backend,
        "injectedBug": verdict.bug,
        "passed": verdict.passed,
        "violations": [v.line() for v in verdict.violations],
        "failingStep": first.step if first else None,
        "failureTrace": verdict.failure_trace,
        "seconds": verdict.seconds,
        "stats": verdict.stats,
    }
