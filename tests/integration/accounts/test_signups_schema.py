"""The `signups` model and migration 0019 agree, on both stores."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mercato.db.base import Base
from mercato.db.runtime import Runtime


def test_models_match_the_migration(runtime: Runtime) -> None:
    with runtime.db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = [d for d in compare_metadata(context, Base.metadata) if "signups" in repr(d)]
    assert diffs == []
