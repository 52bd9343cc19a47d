"""Both blob stores: content addressing, idempotent and atomic puts, honest reads."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from mercato.artifacts.errors import BlobNotFound
from mercato.artifacts.models import ArtifactBlob
from mercato.artifacts.store import (
    BlobStore,
    DatabaseBlobStore,
    LocalBlobStore,
    open_blob_store,
)
from mercato.db.runtime import Runtime

DATA = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(params=["local", "database"])
def store(request: pytest.FixtureRequest, runtime: Runtime, tmp_path: Path) -> BlobStore:
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    return DatabaseBlobStore(runtime.db, runtime.clock)


def test_put_returns_the_sha256_and_read_gives_the_bytes_back(store: BlobStore) -> None:
    assert not store.exists(DIGEST)
    assert store.put(DATA) == DIGEST
    assert store.exists(DIGEST)
    assert store.read(DIGEST) == DATA


def test_put_is_idempotent(store: BlobStore) -> None:
    assert store.put(DATA) == store.put(DATA) == DIGEST
    assert store.read(DIGEST) == DATA


def test_empty_object_is_a_valid_blob(store: BlobStore) -> None:
    digest = store.put(b"")
    assert digest == hashlib.sha256(b"").hexdigest()
    assert store.exists(digest)
    assert store.read(digest) == b""


def test_reading_an_absent_digest_raises(store: BlobStore) -> None:
    with pytest.raises(BlobNotFound):
        store.read("f" * 64)


def test_local_store_shards_by_digest_prefix(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put(DATA)
    path = tmp_path / "blobs" / DIGEST[:2] / DIGEST[2:4] / DIGEST
    assert path.read_bytes() == DATA


def test_local_store_refuses_a_path_that_is_not_a_digest(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    with pytest.raises(ValueError):
        store.exists("../../etc/passwd")


def test_failed_write_leaves_neither_the_object_nor_a_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")

    def broken_fsync(_fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        store.put(DATA)
    monkeypatch.undo()
    assert not store.exists(DIGEST)
    assert [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == []


def test_put_replaces_a_corrupted_copy_atomically(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    store.put(DATA)
    path = store.path_for(DIGEST)
    path.write_bytes(b"bit rot")
    assert store.put(DATA) == DIGEST
    assert path.read_bytes() == DATA
    assert [p.name for p in path.parent.iterdir()] == [DIGEST]


def test_database_store_repairs_a_corrupted_row(runtime: Runtime) -> None:
    store = DatabaseBlobStore(runtime.db, runtime.clock)
    store.put(DATA)
    with runtime.db.transaction() as session:
        session.get_one(ArtifactBlob, DIGEST).data = b"bit rot"
    store.put(DATA)
    assert store.read(DIGEST) == DATA


def test_database_store_keeps_one_row_per_digest_under_concurrent_puts(runtime: Runtime) -> None:
    store = DatabaseBlobStore(runtime.db, runtime.clock)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def put() -> None:
        try:
            barrier.wait(timeout=10)
            store.put(DATA)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with runtime.db.read() as session:
        rows = session.execute(select(ArtifactBlob.digest, ArtifactBlob.size)).all()
    assert rows == [(DIGEST, len(DATA))]


def test_settings_select_the_store(runtime: Runtime) -> None:
    assert isinstance(open_blob_store(runtime), LocalBlobStore)
    shared = Runtime(
        settings=runtime.settings.model_copy(update={"blob_store": "database"}),
        db=runtime.db,
        clock=runtime.clock,
    )
    assert isinstance(open_blob_store(shared), DatabaseBlobStore)
