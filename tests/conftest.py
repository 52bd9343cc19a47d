"""Shared fixtures: a fresh database per test on SQLite and on PostgreSQL, settings, app."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import ProgrammingError

from builders.accounts import PASSWORD_HASH_MEMORY_KIB
from builders.stores import BACKENDS, PG_ADMIN_URL, REQUIRE_POSTGRES
from mercato.db import models
from mercato.db.base import Base
from mercato.db.engine import make_engine
from mercato.db.migrate import upgrade
from mercato.db.runtime import Runtime
from mercato.db.uow import Database
from mercato.settings import Settings

models.load_all()


def _postgres_reachable() -> str | None:
    try:
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


class _PostgresTemplate:
    """One migrated database per test session (per xdist worker); emptied before each test.

    Emptying is one round trip of `DELETE`s with triggers and foreign keys off for that
    transaction (`session_replication_role = replica`, so the append-only guards let the rows
    go): on the shared CI machine a `TRUNCATE` of the 23 tables took 0.7 s a test, the DELETEs
    take a few milliseconds. Commits in this database do not wait for the WAL flush
    (`synchronous_commit = off`): a commit is visible to every other session at once all the
    same; only a crash of the PostgreSQL server itself, which no test provokes, could lose one.
    """

    def __init__(self) -> None:
        self.name = f"mercato_test_{uuid.uuid4().hex[:12]}"
        self.admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
            conn.execute(text(f'ALTER DATABASE "{self.name}" SET synchronous_commit = off'))
        base = PG_ADMIN_URL.rsplit("/", 1)[0]
        self.url = f"{base}/{self.name}"
        self.engine = make_engine(self.url)
        upgrade(self.engine)
        tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
        self._delete = "".join(f'DELETE FROM "{name}";' for name in tables)
        self._truncate = "TRUNCATE {} RESTART IDENTITY CASCADE".format(
            ", ".join(f'"{name}"' for name in tables)
        )

    def truncate(self, engine: Engine | None = None) -> None:
        """Empty every table (the schema and the migration record stay)."""
        with (engine or self.engine).begin() as conn:
            try:
                with conn.begin_nested():
                    conn.execute(text("SET LOCAL session_replication_role = replica"))
            except ProgrammingError:  # not a superuser: the slower way, still correct
                conn.execute(text(self._truncate))
            else:
                conn.execute(text(self._delete))

    def drop(self) -> None:
        self.engine.dispose()
        with self.admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": self.name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}"'))
        self.admin.dispose()


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[_PostgresTemplate | None]:
    if "postgresql" not in BACKENDS:
        yield None
        return
    reason = _postgres_reachable()
    if reason is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required (MERCATO_REQUIRE_POSTGRES) but: {reason}")
        yield None
        return
    template = _PostgresTemplate()
    yield template
    template.drop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "mercato.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A `postgres_only` test has no SQLite variant, a `sqlite_only` test no PostgreSQL one:
    deselect the missing variant rather than skip it."""
    kept, dropped = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        backend = params.params.get("db_url") if params is not None else None
        if (backend == "sqlite" and item.get_closest_marker("postgres_only")) or (
            backend == "postgresql" and item.get_closest_marker("sqlite_only")
        ):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items.sort(key=_dealing_order)
    # xdist's `worksteal` scheduler (scripts/test) hands each of N workers one contiguous
    # slice of the collection, then lets idle workers steal from busy ones: deal the
    # longest-first order out round-robin, so that every slice starts with its share of the
    # long tests instead of one worker holding them all.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and getattr(config.option, "dist", None) == "worksteal":
        items[:] = [items[i] for k in range(workers) for i in range(k, len(items), workers)]


# Modules whose tests take from half a minute to a few minutes each (measured, docs/testing.md).
SLOW_FIRST = (
    "tests/integration/security/test_schemathesis.py",
    "tests/integration/cli/test_admin_arguments.py",
    "tests/integration/cli/test_admin_beside_demo.py",
    "tests/functional/web/",
    "tests/functional/demo/",
    "tests/functional/packaging/",
)
TIERS = ("tests/functional/", "tests/simulation/", "tests/integration/")


def _dealing_order(item: pytest.Item) -> int:
    """Longest first: xdist's `load` scheduler deals tests out in collection order, so a long
    test collected last would keep one process busy after the others have finished. The sort is
    stable: within a rank, modules and their tests keep their order."""
    path = Path(item.path).resolve().relative_to(Path(__file__).resolve().parents[1]).as_posix()
    if path.startswith(SLOW_FIRST):
        return 0
    for rank, tier in enumerate(TIERS, start=1):
        if path.startswith(tier):
            return rank
    return len(TIERS) + 1


@pytest.fixture(params=BACKENDS)
def db_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_template: Path,
    postgres_template: _PostgresTemplate | None,
) -> Iterator[str]:
    """A migrated, empty database of each backend; the PostgreSQL tier says when skipped."""
    if request.param == "sqlite":
        path = tmp_path / "mercato.db"
        shutil.copyfile(sqlite_template, path)
        yield f"sqlite:///{path}"
        return
    if postgres_template is None:
        pytest.skip(
            "PostgreSQL tier skipped: server not reachable (set MERCATO_REQUIRE_POSTGRES=1 "
            "to make this a failure)"
        )
    postgres_template.truncate()
    yield postgres_template.url


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(
        env="dev",
        data_dir=tmp_path / "data",
        database_url=db_url,
        password_hash_memory_kib=PASSWORD_HASH_MEMORY_KIB,
    )


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.from_settings(settings)
    yield rt
    rt.db.dispose()


@pytest.fixture
def db(runtime: Runtime) -> Database:
    return runtime.db
