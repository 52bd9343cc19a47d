"""The `api_keys` model and migration 0021 agree, on both stores, and the schema itself refuses
a limit that is not whole, an unknown period and a negative use."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from builders.accounts import make_account, make_api_key
from mercato.accounts.models import ApiKey
from mercato.db.base import Base
from mercato.db.runtime import Runtime


def test_models_match_the_migration(runtime: Runtime) -> None:
    with runtime.db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = [d for d in compare_metadata(context, Base.metadata) if "api_keys" in repr(d)]
    assert diffs == []


@pytest.mark.parametrize(
    "values",
    [
        {"spend_limit_points": 10},  # no period
        {"spend_limit_period": "DAY"},  # no points
        {"spend_limit_points": -1, "spend_limit_period": "DAY"},
        {"spend_limit_points": 10, "spend_limit_period": "HOUR"},
        {"spent_in_period": -1},
    ],
)
def test_the_schema_refuses_a_broken_limit(runtime: Runtime, values: dict[str, Any]) -> None:
    _, key_id = make_api_key(runtime.db, make_account(runtime.db))
    with pytest.raises(IntegrityError), runtime.db.transaction() as session:
        session.execute(update(ApiKey).where(ApiKey.id == key_id).values(**values))
    with runtime.db.transaction() as session:  # a whole limit is fine
        session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .values(spend_limit_points=0, spend_limit_period="TOTAL", spent_in_period=3)
        )
