"""Artifact downloads: verified against the manifest digest, renamed into place only then."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx
import pytest

from client_sdk.support import FailingStream, Script, Sleeps, problem, receipt
from mercato.client import (
    ArtifactDigestMismatch,
    ArtifactEntry,
    AsyncMercatoClient,
    InvocationNotSettled,
    MercatoClient,
)

DATA = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
DIGEST = hashlib.sha256(DATA).hexdigest()
URL = "/v1/invocations/inv_1/artifacts/thumb-1"


def client(script: Script, sleeps: Sleeps | None = None) -> MercatoClient:
    return MercatoClient(
        "http://mercato.test",
        "mercato_live_x",
        transport=script.transport(),
        sleep=sleeps or Sleeps(),
    )


def test_a_verified_download_lands_at_its_path(tmp_path: Path) -> None:
    script = Script(httpx.Response(200, content=DATA))

    saved = client(script).download_artifact("inv_1", "thumb-1", tmp_path / "t.png", digest=DIGEST)

    assert saved == tmp_path / "t.png" and saved.read_bytes() == DATA
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png"]
    assert script.lines() == [f"GET {URL}"]


def test_a_digest_mismatch_raises_and_leaves_no_file(tmp_path: Path) -> None:
    script = Script(httpx.Response(200, content=DATA[:-1] + b"!"))

    with pytest.raises(ArtifactDigestMismatch) as caught:
        client(script).download_artifact("inv_1", "thumb-1", tmp_path / "t.png", digest=DIGEST)

    assert caught.value.expected == DIGEST
    assert caught.value.actual == hashlib.sha256(DATA[:-1] + b"!").hexdigest()
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


def test_a_mismatch_never_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "t.png"
    target.write_bytes(b"earlier, good copy")
    script = Script(httpx.Response(200, content=b"tampered"))

    with pytest.raises(ArtifactDigestMismatch):
        client(script).download_artifact("inv_1", "thumb-1", target, digest=DIGEST)

    assert target.read_bytes() == b"earlier, good copy"
    assert [p.name for p in tmp_path.iterdir()] == ["t.png"]


def test_the_digest_comes_from_the_receipt_when_not_given(tmp_path: Path) -> None:
    entry = {"artifactId": "thumb-1", "digest": DIGEST, "mediaType": "image/png", "size": 3}
    script = Script(
        receipt(status="SUCCEEDED", artifacts=[entry]), httpx.Response(200, content=b"bad")
    )

    with pytest.raises(ArtifactDigestMismatch):
        client(script).download_artifact("inv_1", "thumb-1", tmp_path / "t.png")

    assert script.lines() == ["GET /v1/invocations/inv_1", f"GET {URL}"]
    assert list(tmp_path.iterdir()) == []


def test_a_dropped_download_starts_over_and_keeps_only_the_whole_object(tmp_path: Path) -> None:
    script = Script(
        httpx.Response(200, stream=FailingStream(DATA[:100])), httpx.Response(200, content=DATA)
    )

    saved = client(script).download_artifact("inv_1", "thumb-1", tmp_path / "t.png", digest=DIGEST)

    assert saved.read_bytes() == DATA
    assert [p.name for p in tmp_path.iterdir()] == ["t.png"]


def test_not_ready_waits_retry_after_and_other_errors_leave_nothing(tmp_path: Path) -> None:
    sleeps = Sleeps()
    script = Script(
        problem(503, "ARTIFACT_NOT_READY", {"Retry-After": "3"}),
        httpx.Response(200, content=DATA),
    )
    client(script, sleeps).download_artifact("inv_1", "thumb-1", tmp_path / "a", digest=DIGEST)
    assert sleeps.calls == [3.0]

    refused = Script(problem(409, "INVOCATION_NOT_SETTLED", settlement="REFUNDED"))
    with pytest.raises(InvocationNotSettled):
        client(refused).download_artifact("inv_1", "thumb-1", tmp_path / "b", digest=DIGEST)
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


def test_a_whole_manifest_is_saved_under_safe_names(tmp_path: Path) -> None:
    other = b"GIF89a-other"
    manifest = (
        ArtifactEntry("thumb-1", DIGEST, "image/png", len(DATA)),
        ArtifactEntry("../../etc/passwd", hashlib.sha256(other).hexdigest(), "image/gif", 12),
    )
    script = Script(httpx.Response(200, content=DATA), httpx.Response(200, content=other))

    saved = client(script).download_artifacts("inv_1", manifest, tmp_path / "out")

    assert [p.parent for p in saved] == [tmp_path / "out"] * 2
    assert saved[0].name == "thumb-1.png" and saved[0].read_bytes() == DATA
    assert saved[1].read_bytes() == other and "/" not in saved[1].name


def test_async_download_mismatch_raises_and_leaves_no_file(tmp_path: Path) -> None:
    script = Script(
        httpx.Response(200, stream=FailingStream(b"x")), httpx.Response(200, content=b"y")
    )
    sleeps = Sleeps()

    async def run() -> None:
        async with AsyncMercatoClient(
            "http://mercato.test", "k", transport=script.transport(), sleep=sleeps.async_sleep
        ) as mercato:
            await mercato.download_artifact("inv_1", "thumb-1", tmp_path / "t", digest=DIGEST)

    with pytest.raises(ArtifactDigestMismatch):
        asyncio.run(run())
    assert list(tmp_path.iterdir()) == []
    assert len(script.requests) == 2 and len(sleeps.calls) == 1
