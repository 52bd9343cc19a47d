"""One `mercato up` per data directory and per PostgreSQL database (DESIGN §11, decision 0551).

`mercato up` takes both locks before it changes anything (the recorded settings, migrations,
the example's connection, the demo keys) and holds them for the life of the run:

- the data directory: an exclusive `flock` on `mercato-up.lock` there, which also records the
  holder's pid and, once the platform answers, its URL;
- a PostgreSQL database: a session-level advisory lock held by one connection of the run; the
  session's `application_name` carries the URL, so a second run on another data directory can
  name it (no table is written).

Both are released by the kernel and the server when the process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from mercato.core.files import ensure_private_dir

LOCK_FILE = "mercato-up.lock"
# pg_try_advisory_lock(int4, int4): "MERC", 1. Any other program taking this pair is a bug.
ADVISORY_KEYS = {"first": 0x4D455243, "second": 1}
APPLICATION_NAME = "mercato up"
_HOLDER = text(
    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = :first AND l.objid = :second AND l.objsubid = 2"
)


class AlreadyRunning(Exception):
    """Another `mercato up` holds the data directory or the database; the message is one line."""


@dataclass
class DemoLock:
    """The locks one `mercato up` holds until `release()` (or its death)."""

    path: Path
    descriptor: int
    engine: Engine | None = None
    connection: Connection | None = None

    def announce(self, url: str) -> None:
        """Record the platform's URL where a second `mercato up` looks for it."""
        _write_holder(self.descriptor, url)
        if self.connection is not None:
            self.connection.execute(
                text("SELECT set_config('application_name', :name, false)"),
                {"name": f"{APPLICATION_NAME} {url}"[:63]},
            )

    def release(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.close()
            self.connection = None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
        if self.descriptor >= 0:
            os.close(self.descriptor)  # closing the file drops the flock
            self.descriptor = -1


def _write_holder(descriptor: int, url: str | None) -> None:
    document = json.dumps({"pid": os.getpid(), "url": url}).encode() + b"\n"
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, document, 0)


def _holder_of(path: Path) -> str:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        url, pid = document.get("url"), document.get("pid")
    except (OSError, ValueError, AttributeError):
        return "a running mercato up"
    return f"{url} (pid {pid})" if url else f"a mercato up still starting (pid {pid})"


def acquire(data_dir: Path, database_url: str) -> DemoLock:
    """Take the data directory's lock, then the database's; `AlreadyRunning` if either is held.

    Nothing is written before both are held but the lock file itself.
    """
    ensure_private_dir(data_dir)
    path = data_dir / LOCK_FILE
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    descriptor = os.open(path, flags, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise AlreadyRunning(
            f"mercato up is already running on the data directory {data_dir}: "
            f"{_holder_of(path)}; stop it first, or give this one another MERCATO_DATA_DIR"
        ) from None
    lock = DemoLock(path, descriptor)
    try:
        _write_holder(descriptor, None)
        if make_url(database_url).get_backend_name() == "postgresql":
            _lock_database(lock, database_url)
    except BaseException:
        lock.release()
        raise
    return lock


def _lock_database(lock: DemoLock, database_url: str) -> None:
    url = make_url(database_url)
    engine = create_engine(
        url,
        poolclass=NullPool,
        isolation_level="AUTOCOMMIT",
        connect_args={"application_name": f"{APPLICATION_NAME} (starting)"},
    )
    lock.engine = engine
    connection = engine.connect()
    taken = connection.scalar(text("SELECT pg_try_advisory_lock(:first, :second)"), ADVISORY_KEYS)
    if taken:
        lock.connection = connection
        return
    holder = connection.scalar(_HOLDER, ADVISORY_KEYS) or ""
    connection.close()
    running = holder.removeprefix(APPLICATION_NAME).strip()
    if running.startswith("http"):
        who = running
    elif running:
        who = "a mercato up still starting"
    else:
        who = "a running mercato up"
    where = f"{url.host or 'localhost'}:{url.port or 5432}/{url.database}"  # never the password
    raise AlreadyRunning(
        f"mercato up is already running on the database {where}: {who}; stop it first, or "
        "give this one another MERCATO_DATABASE_URL"
    )
