"""The provider's durable idempotency store (spec 3.2, 4.2 rule 7).

One row per Idempotency-Key: the accepted marker (key, payload fingerprint, the payload bytes
for recovery, the correlationId) and, once the handler finishes, the final envelope exactly as
it is sent. A unique key decides which of several concurrent requests runs the handler.
"""

from __future__ import annotations

import enum
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    event,
    make_url,
    select,
    update,
)
from sqlalchemy.exc import DisconnectionError, IntegrityError, SQLAlchemyError
from sqlalchemy.pool import QueuePool

from mercato.protocol import IDEMPOTENCY_KEY_MAX_LENGTH, Envelope

_metadata = MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

records = Table(
    "mercato_provider_idempotency",
    _metadata,
    Column("idempotency_key", String(IDEMPOTENCY_KEY_MAX_LENGTH), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("correlation_id", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("outcome", String(32), nullable=True),
    Column("http_status", Integer, nullable=True),
    Column("body", LargeBinary, nullable=True),
    Column("accepted_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("state IN ('ACCEPTED', 'FINAL')", name="state"),
    CheckConstraint(
        "(state = 'ACCEPTED' AND body IS NULL AND http_status IS NULL) OR "
        "(state = 'FINAL' AND body IS NOT NULL AND http_status IS NOT NULL)",
        name="final_has_body",
    ),
)


class RecordState(enum.StrEnum):
    ACCEPTED = "ACCEPTED"
    FINAL = "FINAL"


# The statements of every call, built once (building one cost about as much as running it).
_INSERT = records.insert()
_FINISH = (
    update(records)
    .where(records.c.idempotency_key == bindparam("b_key"))
    .where(records.c.state == RecordState.ACCEPTED.value)
    .values(
        state=RecordState.FINAL.value,
        outcome=bindparam("b_outcome"),
        http_status=bindparam("b_http_status"),
        body=bindparam("b_body"),
        correlation_id=bindparam("b_correlation_id"),
        finished_at=bindparam("b_finished_at"),
    )
)
_GET = select(records).where(records.c.idempotency_key == bindparam("b_key"))


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


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _row_to_record(row: Any) -> StoredRecord:
    accepted_at = _aware(row.accepted_at)
    assert accepted_at is not None
    return StoredRecord(
        key=row.idempotency_key,
        fingerprint=row.fingerprint,
        payload=bytes(row.payload),
        correlation_id=row.correlation_id,
        state=RecordState(row.state),
        accepted_at=accepted_at,
        http_status=row.http_status,
        body=bytes(row.body) if row.body is not None else None,
        finished_at=_aware(row.finished_at),
    )


def _normalise_url(url: str) -> str:
    if "://" not in url:
        return f"sqlite:///{Path(url).resolve()}"
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite_engine(path: Path) -> Engine:
    """An engine that never creates the file: a vanished store must fail, not look empty.

    Connections are pooled (opening one, with its PRAGMAs, cost more than the statements of a
    call), so each checkout checks that the file it was opened on is still the store's file: a
    pooled connection to a deleted file would otherwise go on reading and writing the unlinked
    copy. A stale connection is dropped, and the fresh one the pool then opens fails on a
    missing file (`mode=rw`) instead of creating an empty store.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(path).close()  # create once, now, at construction

    def connect() -> sqlite3.Connection:
        uri = f"file:{path}?mode=rw"
        return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)

    engine = create_engine(
        "sqlite://", creator=connect, poolclass=QueuePool, pool_size=8, max_overflow=32
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        record.info["file"] = _identity(path)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "checkout")
    def _on_checkout(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if _identity(path) != record.info.get("file"):
            raise DisconnectionError("the store's file is gone or was replaced")

    return engine


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class SqlIdempotencyStore:
    """IdempotencyStore on SQLAlchemy: a SQLite file by default, PostgreSQL by URL.

    `url` is a SQLAlchemy URL (`sqlite:////abs/path.db`, `postgresql://…`) or a file path.
    The table is created if it does not exist; it is the provider's own, not the platform's.
    """

    def __init__(self, url: str) -> None:
        url = _normalise_url(url)
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise ValueError("the idempotency store must be durable: give a SQLite file path")
            self.engine = _sqlite_engine(Path(parsed.database))
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
        _metadata.create_all(self.engine)

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    @contextmanager
    def _connect(self, nothing_written: bool = True) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except IntegrityError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable(
                f"idempotency store unavailable: {type(exc).__name__}",
                nothing_written=nothing_written,
            ) from exc

    def accept(
        self, *, key: str, fingerprint: str, payload: bytes, correlation_id: str
    ) -> tuple[StoredRecord, bool]:
        accepted_at = _now()
        values: dict[str, Any] = {
            "idempotency_key": key,
            "fingerprint": fingerprint,
            "payload": payload,
            "correlation_id": correlation_id,
            "state": RecordState.ACCEPTED.value,
            "accepted_at": accepted_at,
        }
        try:
            with self._connect() as conn:
                conn.execute(_INSERT, values)
                self._commit(conn)
        except IntegrityError:
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

    @staticmethod
    def _commit(conn: Connection) -> None:
        """Commit; a failure during COMMIT itself may or may not have written."""
        try:
            conn.commit()
        except IntegrityError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable("commit outcome unknown", nothing_written=False) from exc

    def finish(self, *, key: str, envelope: Envelope) -> StoredRecord:
        body = encode_envelope(envelope)
        with self._connect(nothing_written=False) as conn:
            conn.execute(
                _FINISH,
                {
                    "b_key": key,
                    "b_outcome": envelope.outcome.value,
                    "b_http_status": envelope.status,
                    "b_body": body,
                    "b_correlation_id": envelope.correlation_id,
                    "b_finished_at": _now(),
                },
            )
            self._commit(conn)
        stored = self.get(key)
        if stored is None or not stored.is_final:
            raise StoreUnavailable("final outcome not readable after commit")
        return stored

    def get(self, key: str) -> StoredRecord | None:
        with self._connect() as conn:
            row = conn.execute(_GET, {"b_key": key}).one_or_none()
            conn.rollback()
        return None if row is None else _row_to_record(row)

    def list_accepted(self) -> list[StoredRecord]:
        with self._connect() as conn:
            rows = conn.execute(
                select(records)
                .where(records.c.state == RecordState.ACCEPTED.value)
                .order_by(records.c.accepted_at, records.c.idempotency_key)
            ).all()
            conn.rollback()
        return [_row_to_record(row) for row in rows]

    def check(self) -> None:
        with self._connect() as conn:
            conn.execute(select(records.c.idempotency_key).limit(1)).all()
            conn.rollback()
