"""Provider SDK test helpers: store URLs on SQLite and on throwaway PostgreSQL databases.

Only the SDK, psycopg and pytest are imported here: these helpers run where the provider wheel
is installed alone (scripts/wheels) as well as in the development install.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("MERCATO_REQUIRE_POSTGRES", "").lower() in {"1", "true", "yes"}
BACKENDS = [b for b in os.environ.get("MERCATO_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]
CREDENTIAL = "test-credential-0123456789"
AUTH = {"Authorization": f"Bearer {CREDENTIAL}"}


def _conninfo(url: str) -> str:
    """A SQLAlchemy-style URL (`postgresql+psycopg://…`) as psycopg's `postgresql://…`."""
    scheme, rest = url.split("://", 1)
    return f"postgresql://{rest}" if scheme.startswith("postgres") else url


def _admin_execute(statement: str) -> None:
    import psycopg

    with psycopg.connect(_conninfo(PG_ADMIN_URL), autocommit=True, connect_timeout=10) as conn:
        conn.execute(statement.encode())


def drop_postgres_database(url: str) -> None:
    """Drop the database of `url`, disconnecting its sessions."""
    name = url.rsplit("/", 1)[1]
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Create a fresh PostgreSQL database for one test and drop it afterwards."""
    name = f"mercato_sdk_{uuid.uuid4().hex[:12]}"
    try:
        import psycopg
    except ImportError:
        reason = "psycopg is not installed (pip install 'mercato-provider[postgres]')"
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        _admin_execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL not reachable: {type(exc).__name__}"
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)
    url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def _sdk_postgres() -> Iterator[str]:
    with throwaway_postgres() as url:
        yield url


def _drop_store_table(url: str) -> None:
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True, connect_timeout=10) as conn:
        conn.execute("DROP TABLE IF EXISTS mercato_provider_idempotency")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A provider idempotency store URL: a SQLite file, or a PostgreSQL database of its own.

    On PostgreSQL one database serves the session and the store's table is dropped after each
    test; a test that makes the store unavailable must use `disposable_store_url` instead.
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'provider' / 'store.db'}"
        return
    url = request.getfixturevalue("_sdk_postgres")
    yield url
    _drop_store_table(url)


@pytest.fixture(params=BACKENDS)
def disposable_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Like `store_url`, but a PostgreSQL database that the test may drop."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'provider' / 'store.db'}"
        return
    with throwaway_postgres() as url:
        yield url


class CountingHandler:
    """A handler that counts its runs and answers by the payload's instructions.

    `{"fail": CODE}` → DefinedFailure(CODE, 422); `{"raise": true}` → an exception;
    `{"wait": true}` → blocks until `release` is set; anything else → Success echoing the payload.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, payload: dict[str, object]) -> object:
        from mercato.provider import DefinedFailure, Success

        self.calls += 1
        if payload.get("wait"):
            self.started.set()
            if not self.release.wait(timeout=30):
                raise TimeoutError("test never released the handler")
        if payload.get("raise"):
            raise RuntimeError("infrastructure trouble")
        if "fail" in payload:
            return DefinedFailure(str(payload["fail"]), 422)
        return Success({"echo": payload})
