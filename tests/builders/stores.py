"""Which stores the suite runs on, and where its PostgreSQL is (the environment's choice)."""

from __future__ import annotations

import os

PG_ADMIN_URL = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
"""The admin database's SQLAlchemy URL."""
PG_ADMIN_DSN = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://", 1)
"""The same as a libpq URL (what the bench tools take as `--pg-admin-url`)."""
REQUIRE_POSTGRES = os.environ.get("MERCATO_REQUIRE_POSTGRES", "").lower() in {"1", "true", "yes"}
BACKENDS = [b for b in os.environ.get("MERCATO_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]
