"""The provider's durable idempotency store (spec 3.2, 4.2 rule 7).

One row per Idempotency-Key: the accepted marker (key, payload fingerprint, the payload bytes
for recovery, the correlationId) and, once the handler finishes, the final envelope exactly as
it is sent. A unique key decides which of several concurrent requests runs the handler.
"""

from __future__ import annotations

import contextlib
import enum
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mercato.protocol import IDEMPOTENCY_KEY_MAX_LENGTH, Envelope

TABLE = "mercato_provider_idempotency"


class RecordState(enum.StrEnum):
    ACCEPTED = "ACCEPTED"
    FINAL = "FINAL"


def _create_table(blob: str, timestamp: str) -> str:
    """The table's DDL; the same columns and constraint names on both databases (decision 0040)."""
    return f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    idempotency_key VARCHAR({IDEMPOTENCY_KEY_MAX_LENGTH}) NOT NULL,
    fingerprint VARCHAR(64) NOT NULL,
    payload {blob} NOT NULL,
    correlation_id VARCHAR(64) NOT NULL,
    state VARCHAR(16) NOT NULL,
    outcome VARCHAR(32),
    http_status INTEGER,
    body {blob},
    accepted_at {timestamp} NOT NULL,
    finished_at {timestamp},
    CONSTRAINT pk_{TABLE} PRIMARY KEY (idempotency_key),
    CONSTRAINT ck_{TABLE}_state CHECK (state IN ('ACCEPTED', 'FINAL')),
    CONSTRAINT ck_{TABLE}_final_has_body CHECK (
        (state = 'ACCEPTED' AND body IS NULL AND http_status IS NULL)
        OR (state = 'FINAL' AND body IS NOT NULL AND http_status IS NOT NULL))
)"""


# The statements of every call, literal, with `?` placeholders (PostgreSQL's driver gets `%s`).
_INSERT = (
    "INSERT INTO mercato_provider_idempotency (idempotency_key, fingerprint, payload, "
    "correlation_id, state, accepted_at) VALUES (?, ?, ?, ?, 'ACCEPTED', ?)"
)
_FINISH = (
    "UPDATE mercato_provider_idempotency SET state = 'FINAL', outcome = ?, http_status = ?, "
    "body = ?, correlation_id = ?, finished_at = ? "
    "WHERE idempotency_key = ? AND state = 'ACCEPTED'"
)
_SELECT = (
    "SELECT idempotency_key, fingerprint, payload, correlation_id, state, outcome, http_status, "
    "body, accepted_at, finished_at FROM mercato_provider_idempotency "
)
_GET = _SELECT + "WHERE idempotency_key = ?"
_LIST_ACCEPTED = _SELECT + "WHERE state = 'ACCEPTED' ORDER BY accepted_at, idempotency_key"
_CHECK = "SELECT idempotency_key FROM mercato_provider_idempotency LIMIT 1"


class StoreUnavailable(Exception):
    """The store could not answer. `nothing_written` is True only when it provably wrote nothing."""

    def __init__(self, message: str, *, nothing_written: bool = False) -> None:
        super().__init__(message)
        self.nothing_written = nothing_written


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One key's record: accepted (no body yet) or final (the envelope as sent)."""

    key: str
    fingerprint: str
    payload: bytes
    correlation_id: str
    state: RecordState
    accepted_at: datetime
    http_status: int | None = None
    body: bytes | None = None
    finished_at: datetime | None = None

    @property
    def is_final(self) -> bool:
        return self.state is RecordState.FINAL


@runtime_checkable
class IdempotencyStore(Protocol):
    """Durable per-key records; each method raises StoreUnavailable when it cannot answer."""

    def accept(
        self, *, key: str, fingerprint: str, payload: bytes, correlation_id: str
    ) -> tuple[StoredRecord, bool]:
        """Commit a new accepted marker, or return the existing record; the bool says created."""
        ...

    def finish(self, *, key: str, envelope: Envelope) -> StoredRecord:
        """Commit the final envelope of an accepted key; return the record as now stored.

        A key that is already final keeps its first outcome.
        """
        ...

    def get(self, key: str) -> StoredRecord | None:
        """Return the record of `key`, or None when the (healthy) store has none. Writes nothing."""
        ...

    def list_accepted(self) -> list[StoredRecord]:
        """Return the records still accepted but not final, oldest first."""
        ...

    def check(self) -> None:
        """Raise StoreUnavailable unless the store's table can be read (readiness)."""
        ...


def encode_envelope(envelope: Envelope) -> bytes:
    """Serialise an envelope as compact JSON; raises ValueError/TypeError for non-JSON results."""
    text = json.dumps(
        envelope.to_json(), separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def _now() -> datetime:
    return datetime.now(UTC)


def _sqlite_time(value: datetime) -> str:
    """UTC as `YYYY-MM-DD HH:MM:SS.ffffff`, the text form earlier store files hold (sorts)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _read_time(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _row_to_record(row: tuple[Any, ...]) -> StoredRecord:
    (key, fingerprint, payload, correlation_id, state, _outcome, http_status, body) = row[:8]
    accepted_at = _read_time(row[8])
    assert accepted_at is not None
    return StoredRecord(
        key=key,
        fingerprint=fingerprint,
        payload=bytes(payload),
        correlation_id=correlation_id,
        state=RecordState(state),
        accepted_at=accepted_at,
        http_status=http_status,
        body=bytes(body) if body is not None else None,
        finished_at=_read_time(row[9]),
    )


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class _Backend:
    """One database's connections: how to open, check, and talk to them (a DB-API 2 driver)."""

    placeholder = "?"
    pool_size, pool_overflow = 8, 32  # decision 0190; handlers run on a thread pool
    integrity_error: type[Exception] = sqlite3.IntegrityError
    errors: tuple[type[Exception], ...] = (sqlite3.Error, OSError)

    def connect(self) -> Any:
        raise NotImplementedError

    def usable(self, conn: Any) -> bool:
        """Whether a pooled connection may serve another call."""
        return True

    def create_table(self, conn: Any) -> None:
        raise NotImplementedError

    def time(self, value: datetime) -> Any:
        return value


class _SqliteBackend(_Backend):
    """A SQLite file that is never created after construction: a vanished store must fail,
    not look empty (decision 0040).

    Each pooled connection remembers the (device, inode) of the file it opened, and a checkout
    drops a connection whose file is no longer the store path's file: a pooled connection to a
    deleted file would otherwise go on reading and writing the unlinked copy (decision 0190).
    The fresh connection then fails on a missing file (`mode=rw`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(path).close()  # create once, now, at construction
        self._files: dict[int, tuple[int, int] | None] = {}

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            f"file:{self.path}?mode=rw", uri=True, timeout=30, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=30000")
        except BaseException:
            conn.close()
            raise
        self._files[id(conn)] = _identity(self.path)
        return conn

    def usable(self, conn: Any) -> bool:
        return self._files.get(id(conn)) == _identity(self.path)

    def forget(self, conn: Any) -> None:
        self._files.pop(id(conn), None)

    def create_table(self, conn: Any) -> None:
        conn.execute(_create_table("BLOB", "DATETIME"))

    def time(self, value: datetime) -> Any:
        return _sqlite_time(value)


class _PostgresBackend(_Backend):
    """PostgreSQL through psycopg 3 (`pip install 'mercato-provider[postgres]'`)."""

    placeholder = "%s"
    pool_size, pool_overflow = 10, 20  # a share of the server's connection limit per replica

    def __init__(self, conninfo: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ValueError(
                "a PostgreSQL store needs psycopg: pip install 'mercato-provider[postgres]'"
            ) from exc
        self._psycopg = psycopg
        self.conninfo = conninfo
        self.integrity_error = psycopg.IntegrityError
        self.errors = (psycopg.Error, OSError)

    def connect(self) -> Any:
        return self._psycopg.connect(self.conninfo, connect_timeout=30)

    def usable(self, conn: Any) -> bool:
        """A ping before reuse: a server restart must not fail the next call (pre-ping)."""
        if conn.closed:
            return False
        try:
            conn.execute("SELECT 1")
        except self.errors:
            return False
        return True

    def create_table(self, conn: Any) -> None:
        conn.execute(_create_table("BYTEA", "TIMESTAMP WITH TIME ZONE"))


def _backend(url: str) -> _Backend:
    """A file path, `sqlite:///relative.db`, `sqlite:////abs/path.db` or a PostgreSQL URL."""
    if "://" not in url:
        return _SqliteBackend(Path(url).resolve())
    scheme, rest = url.split("://", 1)
    if scheme == "sqlite":
        database = rest[1:] if rest.startswith("/") else ""
        if not database or database == ":memory:" or "?" in database:
            raise ValueError("the idempotency store must be durable: give a SQLite file path")
        return _SqliteBackend(Path(database).resolve())
    if scheme in {"postgresql", "postgres", "postgresql+psycopg"}:
        return _PostgresBackend(f"postgresql://{rest}")
    raise ValueError(f"unsupported store URL scheme {scheme!r}: use a file path or postgresql://")


class _PoolTimeout(Exception):
    """No connection came free within the pool's timeout."""


class _Pool:
    """Open connections kept for reuse: `size` idle at most, `size + overflow` in use at most."""

    def __init__(self, backend: _Backend, *, size: int, overflow: int, timeout: float) -> None:
        self.backend = backend
        self.size = size
        self.timeout = timeout
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size + overflow)

    def checkout(self) -> Any:
        if not self._slots.acquire(timeout=self.timeout):
            raise _PoolTimeout("no idempotency store connection free")
        try:
            while True:
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
                if conn is None:
                    return self.backend.connect()
                if self.backend.usable(conn):
                    return conn
                self._discard(conn)
        except BaseException:
            self._slots.release()
            raise

    def checkin(self, conn: Any, *, reuse: bool) -> None:
        try:
            if reuse:
                with self._lock:
                    if len(self._idle) < self.size:
                        self._idle.append(conn)
                        return
            self._discard(conn)
        finally:
            self._slots.release()

    def _discard(self, conn: Any) -> None:
        forget = getattr(self.backend, "forget", None)
        if forget is not None:
            forget(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def dispose(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)


class SqlIdempotencyStore:
    """IdempotencyStore on the standard library's sqlite3 (a file by default) or, by URL, on
    PostgreSQL through psycopg: no ORM, so the provider SDK installs light (decision 0281).

    `url` is a file path, `sqlite:////abs/path.db`, or `postgresql://…`. The table is created
    if it does not exist; it is the provider's own, not the platform's. Connections are pooled
    (decision 0190): on SQLite 8 kept and 40 in use at most, on PostgreSQL 10 and 30.
    """

    def __init__(self, url: str) -> None:
        self._backend = _backend(url)
        self._sql = {
            name: statement.replace("?", self._backend.placeholder)
            for name, statement in {
                "insert": _INSERT,
                "finish": _FINISH,
                "get": _GET,
                "list": _LIST_ACCEPTED,
                "check": _CHECK,
            }.items()
        }
        self._pool = _Pool(
            self._backend,
            size=self._backend.pool_size,
            overflow=self._backend.pool_overflow,
            timeout=30,
        )
        try:
            with self._connect() as conn:
                self._backend.create_table(conn)
                self._commit(conn)
        except self._backend.integrity_error:
            pass  # another replica created the table at the same moment; it exists

    def close(self) -> None:
        """Release pooled connections (the store stays usable and reconnects on demand)."""
        self._pool.dispose()

    @contextmanager
    def _connect(self, nothing_written: bool = True) -> Iterator[Any]:
        errors = self._backend.errors
        unavailable: tuple[type[Exception], ...] = (_PoolTimeout, *errors)
        try:
            conn = self._pool.checkout()
        except unavailable as exc:
            raise StoreUnavailable(
                f"idempotency store unavailable: {type(exc).__name__}",
                nothing_written=nothing_written,
            ) from exc
        reuse = False
        try:
            yield conn
            reuse = True
        except self._backend.integrity_error:
            reuse = self._rollback(conn)
            raise
        except StoreUnavailable:
            raise
        except errors as exc:
            raise StoreUnavailable(
                f"idempotency store unavailable: {type(exc).__name__}",
                nothing_written=nothing_written,
            ) from exc
        finally:
            self._pool.checkin(conn, reuse=reuse)

    def _rollback(self, conn: Any) -> bool:
        try:
            conn.rollback()
        except self._backend.errors:
            return False
        return True

    def _commit(self, conn: Any) -> None:
        """Commit; a failure during COMMIT itself may or may not have written."""
        try:
            conn.commit()
        except self._backend.integrity_error:
            raise
        except self._backend.errors as exc:
            raise StoreUnavailable("commit outcome unknown", nothing_written=False) from exc

    def accept(
        self, *, key: str, fingerprint: str, payload: bytes, correlation_id: str
    ) -> tuple[StoredRecord, bool]:
        accepted_at = _now()
        values = (key, fingerprint, payload, correlation_id, self._backend.time(accepted_at))
        try:
            with self._connect() as conn:
                conn.execute(self._sql["insert"], values)
                self._commit(conn)
        except self._backend.integrity_error:
            # The key is taken, so something was accepted: no failure here may claim otherwise.
            try:
                existing = self.get(key)
            except StoreUnavailable as exc:
                raise StoreUnavailable("key exists but cannot be read") from exc
            if existing is None:
                raise StoreUnavailable("key conflict but no record found") from None
            return existing, False
        created = StoredRecord(
            key=key,
            fingerprint=fingerprint,
            payload=payload,
            correlation_id=correlation_id,
            state=RecordState.ACCEPTED,
            accepted_at=accepted_at,
        )
        return created, True

    def finish(self, *, key: str, envelope: Envelope) -> StoredRecord:
        body = encode_envelope(envelope)
        values = (
            envelope.outcome.value,
            envelope.status,
            body,
            envelope.correlation_id,
            self._backend.time(_now()),
            key,
        )
        with self._connect(nothing_written=False) as conn:
            conn.execute(self._sql["finish"], values)
            self._commit(conn)
        stored = self.get(key)
        if stored is None or not stored.is_final:
            raise StoreUnavailable("final outcome not readable after commit")
        return stored

    def get(self, key: str) -> StoredRecord | None:
        with self._connect() as conn:
            row = conn.execute(self._sql["get"], (key,)).fetchone()
            conn.rollback()
        return None if row is None else _row_to_record(tuple(row))

    def list_accepted(self) -> list[StoredRecord]:
        with self._connect() as conn:
            rows = conn.execute(self._sql["list"]).fetchall()
            conn.rollback()
        return [_row_to_record(tuple(row)) for row in rows]

    def check(self) -> None:
        with self._connect() as conn:
            conn.execute(self._sql["check"]).fetchall()
            conn.rollback()
