"""Pooled PostgreSQL connections: one that died while idle is replaced, not handed out."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from mercato.db import engine as engine_module
from mercato.db.engine import make_engine

pytestmark = pytest.mark.postgres_only


def _pool_with_a_dead_connection(url: str) -> tuple[Engine, int]:
    """An engine whose only pooled connection the server has terminated; and its old pid."""
    engine = make_engine(url, pool_size=1, max_overflow=0)
    with engine.connect() as connection:
        pid = int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())
    admin = make_engine(url)
    with admin.connect() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    admin.dispose()
    return engine, pid


def test_a_connection_that_died_while_idle_is_replaced(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, dead_pid = _pool_with_a_dead_connection(db_url)
    monkeypatch.setattr(engine_module, "IDLE_PING_SECONDS", 0.0)  # everything counts as idle
    with engine.connect() as connection:
        assert connection.execute(text("SELECT pg_backend_pid()")).scalar_one() != dead_pid
    engine.dispose()


def test_a_busy_pool_is_not_pinged(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Within the idle threshold a connection is handed out as it is, without a ping round
    # trip: the statement itself is what finds this one dead.
    engine, _ = _pool_with_a_dead_connection(db_url)
    monkeypatch.setattr(engine_module, "IDLE_PING_SECONDS", 3600.0)
    with pytest.raises(OperationalError), engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    engine.dispose()
