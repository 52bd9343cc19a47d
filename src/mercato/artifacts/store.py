"""The blob store seam: content-addressed bytes on local disk or in the shared database."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from mercato.artifacts.errors import BlobNotFound
from mercato.artifacts.models import ArtifactBlob
from mercato.core.clock import Clock
from mercato.db.runtime import Runtime
from mercato.db.uow import Database

DEFAULT_MEDIA_TYPE = "application/octet-stream"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes) -> str:
    """Return the lowercase hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """Tell whether `value` is a lowercase hex SHA-256 digest."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


class BlobStore(Protocol):
    """Content-addressed bytes: the key of an object is the SHA-256 of its content."""

    def put(self, data: bytes, *, media_type: str = DEFAULT_MEDIA_TYPE) -> str:
        """Store `data` (no-op when an intact copy exists) and return its digest."""
        ...

    def read(self, digest: str) -> bytes:
        """Return the stored bytes, unverified; raise BlobNotFound when absent."""
        ...

    def exists(self, digest: str) -> bool:
        """Tell whether an object is stored under `digest` (its content is not checked)."""
        ...


class LocalBlobStore:
    """Objects as files `<root>/<d[0:2]>/<d[2:4]>/<digest>`, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, digest: str) -> Path:
        if not is_digest(digest):
            raise ValueError("not a SHA-256 hex digest")
        return self.root / digest[0:2] / digest[2:4] / digest

    def put(self, data: bytes, *, media_type: str = DEFAULT_MEDIA_TYPE) -> str:
        digest = sha256_hex(data)
        final = self.path_for(digest)
        if final.is_file() and sha256_hex(final.read_bytes()) == digest:
            return digest
        final.parent.mkdir(parents=True, exist_ok=True)
        # Temp file in the target directory: same filesystem, so the rename is atomic and a
        # reader sees either no file or the whole file, never a partial one.
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", dir=final.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, final)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        _fsync_dir(final.parent)
        return digest

    def read(self, digest: str) -> bytes:
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"No blob {digest}") from None

    def exists(self, digest: str) -> bool:
        return self.path_for(digest).is_file()


def _fsync_dir(directory: Path) -> None:
    """Persist a rename: fsync the directory entry (POSIX; a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class DatabaseBlobStore:
    """Objects as rows of `artifact_blobs.data`, shared by every host on one database.

    Each call runs its own short transaction: a put is durable when it returns, like a file
    rename, and never joins a caller's transaction.
    """

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def put(self, data: bytes, *, media_type: str = DEFAULT_MEDIA_TYPE) -> str:
        digest = sha256_hex(data)
        with self.db.transaction() as session:
            _insert_blob_row(
                session,
                digest=digest,
                size=len(data),
                media_type=media_type,
                now=self.clock.now(),
                data=data,
            )
            stored = session.execute(
                select(ArtifactBlob.data).where(ArtifactBlob.digest == digest)
            ).scalar_one()
            if stored is None or sha256_hex(stored) != digest:
                session.execute(
                    update(ArtifactBlob)
                    .where(ArtifactBlob.digest == digest)
                    .values(data=data, size=len(data))
                )
        return digest

    def read(self, digest: str) -> bytes:
        with self.db.read() as session:
            data = session.execute(
                select(ArtifactBlob.data).where(ArtifactBlob.digest == digest)
            ).scalar_one_or_none()
        if data is None:
            raise BlobNotFound(f"No blob {digest}")
        return bytes(data)

    def exists(self, digest: str) -> bool:
        with self.db.read() as session:
            found = session.execute(
                select(ArtifactBlob.digest).where(
                    ArtifactBlob.digest == digest, ArtifactBlob.data.is_not(None)
                )
            ).first()
        return found is not None


def _insert_blob_row(
    session: Session,
    *,
    digest: str,
    size: int,
    media_type: str,
    now: dt.datetime,
    data: bytes | None,
) -> None:
    """Insert a blob row unless one exists (concurrent writers of one digest both succeed)."""
    values = {
        "digest": digest,
        "size": size,
        "media_type": media_type,
        "created_at": now,
        "data": data,
    }
    if session.get_bind().dialect.name == "postgresql":
        pg = postgresql.insert(ArtifactBlob).values(**values)
        session.execute(pg.on_conflict_do_nothing(index_elements=["digest"]))
    else:
        lite = sqlite.insert(ArtifactBlob).values(**values)
        session.execute(lite.on_conflict_do_nothing(index_elements=["digest"]))


def record_blob(
    session: Session, *, digest: str, size: int, media_type: str, now: dt.datetime
) -> None:
    """Note in `artifact_blobs` that the store holds `digest` (metadata only, no bytes)."""
    _insert_blob_row(session, digest=digest, size=size, media_type=media_type, now=now, data=None)


def open_blob_store(runtime: Runtime) -> BlobStore:
    """Return the store `settings.blob_store` selects."""
    if runtime.settings.blob_store == "database":
        return DatabaseBlobStore(runtime.db, runtime.clock)
    return LocalBlobStore(runtime.settings.data_dir / "blobs")
