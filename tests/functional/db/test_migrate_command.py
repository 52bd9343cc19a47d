"""`mercato migrate` creates the whole schema on an empty database; running it twice is harmless."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from mercato.db import models
from mercato.db.base import Base

pytestmark = pytest.mark.functional

PG_ADMIN_URL = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _migrate(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_template: object
) -> Iterator[tuple[str, str]]:
    """(the URL given to mercato, the SQLAlchemy URL to inspect it) of an empty database."""
    if request.param == "sqlite":
        path = tmp_path / "fresh" / "mercato.db"
        path.parent.mkdir()
        url = f"sqlite:///{path}"
        yield url, url
        return
    if postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    name = f"mercato_migrate_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"postgresql://{base.split('://', 1)[1]}/{name}", f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_migrate_creates_every_table_and_is_idempotent(
    empty_database: tuple[str, str], tmp_path: Path
) -> None:
    given_url, inspect_url = empty_database
    env = {
        **os.environ,
        "MERCATO_ENV": "dev",
        "MERCATO_DATA_DIR": str(tmp_path / "data"),
        "MERCATO_DATABASE_URL": given_url,
    }
    first = _migrate(env)
    assert first.returncode == 0, first.stderr
    models.load_all()
    engine = create_engine(inspect_url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert {t.name for t in Base.metadata.sorted_tables} <= tables
        assert "alembic_version" in tables
        with engine.connect() as conn:
            head = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()

    second = _migrate(env)
    assert second.returncode == 0, second.stderr
    engine = create_engine(inspect_url)
    try:
        assert set(inspect(engine).get_table_names()) == tables
        with engine.connect() as conn:
            again = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert again == head
    finally:
        engine.dispose()
