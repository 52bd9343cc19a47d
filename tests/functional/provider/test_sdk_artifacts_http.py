"""An artifact-producing SDK provider serves what its manifest names, over real HTTP."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from builders.provider import AUTH

pytestmark = pytest.mark.functional


def test_manifest_digest_downloads_the_exact_bytes(provider_process, tmp_path):
    provider_process.start("--blobs", str(tmp_path / "blobs"))
    base = provider_process.base_url
    response = httpx.post(
        f"{base}/v1/executions",
        json={"payload": {"job": "thumb", "artifact": "tiny image"}},
        headers={**AUTH, "Idempotency-Key": "art-1"},
        timeout=30,
    )
    assert response.status_code == 200
    (entry,) = response.json()["result"]["artifacts"]
    assert entry["digest"] == hashlib.sha256(b"tiny image").hexdigest()
    assert entry == {
        "artifactId": "a1",
        "digest": entry["digest"],
        "mediaType": "text/plain",
        "size": 10,
    }
    download = httpx.get(f"{base}/v1/artifacts/{entry['digest']}", headers=AUTH, timeout=30)
    assert download.status_code == 200
    assert download.content == b"tiny image"
