"""Content-addressed blob store for artifact bytes (name = SHA-256 lowercase hex)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def is_digest(value: str) -> bool:
    """Return whether `value` is a lowercase hex SHA-256 digest."""
    return bool(_DIGEST.match(value))


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@runtime_checkable
class BlobStore(Protocol):
    """Where a provider keeps the bytes its artifact manifests name."""

    def put(self, data: bytes) -> str:
        """Store `data` and return its SHA-256 hex digest; storing twice is harmless."""
        ...

    def get(self, digest: str) -> bytes | None:
        """Return the bytes for `digest`, or None when absent."""
        ...

    def has(self, digest: str) -> bool:
        """Return whether `digest` is stored."""
        ...

    def check(self) -> None:
        """Raise OSError when the store cannot be used (readiness)."""
        ...


class LocalBlobStore:
    """Blobs as files `<root>/<aa>/<digest>`, written to a temp file then renamed atomically."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise ValueError("not a SHA-256 hex digest")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            return digest  # already stored intact; a corrupted copy is replaced below
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_directory(path.parent)
        return digest

    def get(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        try:
            data = self._path(digest).read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            raise OSError(f"blob {digest} is corrupt")
        return data

    def has(self, digest: str) -> bool:
        return is_digest(digest) and self._path(digest).is_file()

    def check(self) -> None:
        if not self.root.is_dir() or not os.access(self.root, os.W_OK | os.X_OK):
            raise OSError("blob directory is missing or not writable")
