"""Handler return values: the SDK refuses to build answers the protocol forbids."""

import hashlib

import pytest

from mercato.provider import Artifact, DefinedFailure, DefinedFailureError, LocalBlobStore, Success


def test_success_merges_the_manifest_into_the_result(tmp_path) -> None:
    blobs = LocalBlobStore(tmp_path)
    artifact = Artifact.put(blobs, b"png-bytes", media_type="image/png", artifact_id="thumb-1")
    assert artifact.digest == hashlib.sha256(b"png-bytes").hexdigest()
    assert Success({"x": 1}, artifacts=[artifact]).result_json() == {
        "x": 1,
        "artifacts": [
            {
                "artifactId": "thumb-1",
                "digest": artifact.digest,
                "mediaType": "image/png",
                "size": 9,
            }
        ],
    }


def test_success_refuses_two_manifests() -> None:
    artifact = Artifact("a", "0" * 64, "text/plain", 1)
    with pytest.raises(ValueError):
        Success({"artifacts": []}, artifacts=[artifact])


@pytest.mark.parametrize(
    ("code", "status"), [("", 400), ("X" * 65, 400), ("OK", 200), ("OK", 302), ("OK", 600)]
)
def test_defined_failure_needs_a_short_code_and_an_error_status(code: str, status: int) -> None:
    with pytest.raises(ValueError):
        DefinedFailure(code, status)
    with pytest.raises(ValueError):
        DefinedFailureError(code, status)


def test_defined_failure_accepts_a_64_character_code() -> None:
    assert DefinedFailure("C" * 64, 404).http_status == 404


def test_artifact_digest_must_be_sha256_hex() -> None:
    with pytest.raises(ValueError):
        Artifact("a", "ABC", "text/plain", 1)


@pytest.mark.parametrize("artifact_id", ["", "a/b", ".", "..", "x" * 129, "sp ace"])
def test_artifact_id_must_fit_one_path_segment(artifact_id: str) -> None:
    with pytest.raises(ValueError):
        Artifact(artifact_id, "0" * 64, "text/plain", 1)
