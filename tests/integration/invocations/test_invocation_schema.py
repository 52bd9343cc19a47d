"""The invocations models and migrations 0005 and 0010 describe the same tables."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mercato.db.base import Base
from mercato.db.runtime import Runtime

TABLES = {"invocations", "invocation_attempts", "invocation_dues"}


def _ours(diff: object) -> bool:
    text = repr(diff)
    return any(f"'{table}'" in text or f"Table('{table}'" in text for table in TABLES)


def test_models_match_the_migrations(runtime: Runtime) -> None:
    with runtime.db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = [d for d in compare_metadata(context, Base.metadata) if _ours(d)]
    assert diffs == []
