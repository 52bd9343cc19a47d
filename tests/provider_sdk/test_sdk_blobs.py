"""LocalBlobStore: content addressed, atomic writes, corruption detected."""

import hashlib

import pytest

from mercato.provider import BlobStore, LocalBlobStore


def test_put_returns_the_sha256_and_get_returns_the_bytes(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    assert isinstance(blobs, BlobStore)
    digest = blobs.put(b"hello")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert blobs.get(digest) == b"hello"
    assert blobs.has(digest)
    assert blobs.put(b"hello") == digest
    leftovers = [p for p in (tmp_path / "blobs").rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_unknown_or_malformed_digest_is_absent(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path)
    assert blobs.get("0" * 64) is None
    assert blobs.get("../../etc/passwd") is None
    assert not blobs.has("not-a-digest")


def test_corrupted_blob_is_not_served(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path)
    digest = blobs.put(b"original")
    (tmp_path / digest[:2] / digest).write_bytes(b"tampered")
    with pytest.raises(OSError):
        blobs.get(digest)


def test_check_fails_when_the_directory_is_gone(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path / "b")
    blobs.check()
    (tmp_path / "b").rmdir()
    with pytest.raises(OSError):
        blobs.check()


def test_put_replaces_a_corrupted_copy(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path)
    digest = blobs.put(b"original")
    (tmp_path / digest[:2] / digest).write_bytes(b"tampered")
    assert blobs.put(b"original") == digest
    assert blobs.get(digest) == b"original"
