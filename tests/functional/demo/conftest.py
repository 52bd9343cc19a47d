"""`mercato up` as a real process: a backend per test (SQLite file or a throwaway PostgreSQL DB)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from builders.demo import UpProcess

PG_ADMIN_URL = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("MERCATO_REQUIRE_POSTGRES", "").lower() in {"1", "true", "yes"}
BACKENDS = [b for b in os.environ.get("MERCATO_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]


def _postgres_problem() -> str | None:
    try:
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


@pytest.fixture(params=BACKENDS)
def database_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """MERCATO_DATABASE_URL for the backend: none (SQLite under the data dir) or a new PG DB."""
    if request.param == "sqlite":
        yield {}
        return
    problem = _postgres_problem()
    if problem is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required (MERCATO_REQUIRE_POSTGRES) but: {problem}")
        pytest.skip(f"PostgreSQL tier skipped: {problem}")
    name = f"mercato_up_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql+psycopg://", "postgresql://")
    try:
        yield {"MERCATO_DATABASE_URL": f"{base}/{name}"}
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


@pytest.fixture
def demo_env(database_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The environment of a user running `mercato up`: no MERCATO_* set but data dir/database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env["MERCATO_DATA_DIR"] = str(tmp_path / "var")
    env.update(database_env)
    return env


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[Callable[..., UpProcess]]:
    """Start `mercato up` processes; any left running are killed at the end."""
    started: list[UpProcess] = []

    def start(env: dict[str, str], *args: str) -> UpProcess:
        up = UpProcess(list(args), env, tmp_path / f"up-{len(started)}.stderr.log")
        started.append(up)
        return up

    yield start
    for up in started:
        up.kill()
