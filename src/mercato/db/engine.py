"""Engine creation: SQLite (WAL, foreign keys, busy timeout) or PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, make_url
from sqlalchemy.pool import NullPool

from mercato.core.files import create_private_file

READ_OPTION = "mercato_read"
"""Execution option marking a read session's connection (SQLite begins it DEFERRED)."""


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
            _create_sqlite_file(url)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            **kwargs,
        )
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    engine = create_engine(url, **kwargs)
    _ping_idle_connections(engine)
    return engine


IDLE_PING_SECONDS = 5.0
"""A pooled PostgreSQL connection idle for longer is pinged before use (decision 0183)."""


def _ping_idle_connections(engine: Engine) -> None:
    """Pessimistic disconnect handling for connections that sat idle, without `pool_pre_ping`'s
    round trip on every checkout (an invoke checks out four times; under load a connection is
    never idle long). A dead connection is discarded and the pool hands out a fresh one."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since <= IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as error:  # any failure: the pool retries with a new connection
            raise exc.DisconnectionError("the pooled connection is gone") from error


def _create_sqlite_file(url: str) -> None:
    """Create a new SQLite database file 0600 before SQLite does (it would make it 0644 under
    the usual umask); SQLite gives its -wal and -shm files the database file's mode."""
    database = make_url(url).database
    if not database or database.startswith("file:") or (make_url(url).query.get("uri")):
        return  # a URI filename names its file its own way; SQLite creates that one
    path = Path(database)
    if path.parent.is_dir():
        create_private_file(path)


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
        # Writers take the lock up front: no lost update, no deadlock on upgrade. Read sessions
        # (Database.read) begin DEFERRED: a snapshot, without queueing behind the writers.
        if conn.get_execution_options().get(READ_OPTION):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
