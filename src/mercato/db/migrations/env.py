"""Alembic environment: uses the engine handed over by `mercato.db.migrate`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from mercato.db import models as _models
from mercato.db.base import Base

_models.load_all()

engine: Engine = context.config.attributes["engine"]
target_metadata = Base.metadata

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=engine.dialect.name == "sqlite",
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
