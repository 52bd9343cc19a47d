"""Engine creation: SQLite (WAL, foreign keys, busy timeout) or PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for `url` with Mercato's per-backend settings."""
    if url.startswith("sqlite"):
        if ":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite+pysqlite:"):
            kwargs.setdefault("poolclass", NullPool)
        else:
            # Pooled: a connection (and its PRAGMAs) is reused instead of opened per
            # transaction, a third of an invoke's CPU (docs/performance.md). Every transaction
            # still starts with BEGIN IMMEDIATE; the overflow exceeds the request thread pool
            # (40), so a thread never waits for a connection, only for SQLite's write lock.
            kwargs.setdefault("pool_size", 10)
            kwargs.setdefault("max_overflow", 60)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            **kwargs,
        )
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transactions into our own hands so BEGIN IMMEDIATE serialises writers.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the lock up front: no lost update, no deadlock on upgrade.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
