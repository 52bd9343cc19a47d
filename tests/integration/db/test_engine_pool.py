"""Pooled PostgreSQL connections: one that died while idle is replaced, not handed out."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from mercato.db import engine as engine_module
from mercato.db.engine import make_engine

pytestmark = pytest.mark.postgres_only


def test_a_connection_that_died_while_idle_is_replaced(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(db_url, pool_size=1, max_overflow=0)
    with engine.connect() as connection:
        dead_pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    admin = make_engine(db_url)
    with admin.connect() as connection:
        connection.exec_driver_sql("SELECT pg_terminate_backend(%s)" % int(dead_pid or 0))
    admin.dispose()
    monkeypatch.setattr(engine_module, "IDLE_PING_SECONDS", 0.0)  # everything counts as idle
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT pg_backend_pid()").scalar() != dead_pid
    engine.dispose()


def test_a_busy_pool_is_not_pinged(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Within the idle threshold the connection is handed out as it is: no ping round trip.
    # (Shown by killing it: the next statement finds it dead.)
    engine = make_engine(db_url, pool_size=1, max_overflow=0)
    with engine.connect() as connection:
        dead_pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    admin = make_engine(db_url)
    with admin.connect() as connection:
        connection.exec_driver_sql("SELECT pg_terminate_backend(%s)" % int(dead_pid or 0))
    admin.dispose()
    monkeypatch.setattr(engine_module, "IDLE_PING_SECONDS", 3600.0)
    with pytest.raises(OperationalError), engine.connect() as connection:
        connection.exec_driver_sql("SELECT 1")
    engine.dispose()
