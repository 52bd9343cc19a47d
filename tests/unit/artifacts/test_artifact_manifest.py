"""Manifest validation (DESIGN §7): what a provider may put in `artifacts`."""

from __future__ import annotations

from typing import Any

import pytest

from mercato.artifacts.errors import ManifestInvalid
from mercato.artifacts.schemas import ManifestEntry
from mercato.artifacts.service import MAX_ARTIFACT_BYTES, validate_manifest

GOOD: dict[str, Any] = {
    "artifactId": "chart-1",
    "digest": "a" * 64,
    "mediaType": "image/png",
    "size": 12,
}


def test_a_valid_manifest_parses_in_order() -> None:
    second = {**GOOD, "artifactId": "table", "mediaType": 'text/csv; charset="utf-8"', "size": 0}
    assert validate_manifest([GOOD, second]) == [
        ManifestEntry("chart-1", "a" * 64, "image/png", 12),
        ManifestEntry("table", "a" * 64, 'text/csv; charset="utf-8"', 0),
    ]


def test_the_empty_manifest_is_valid() -> None:
    assert validate_manifest([]) == []


def test_unknown_members_are_ignored() -> None:
    assert validate_manifest([{**GOOD, "caption": "x"}])[0].artifact_id == "chart-1"


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("artifactId", ""),
        ("artifactId", "x" * 129),
        ("artifactId", "a/b"),
        ("artifactId", ".."),
        ("artifactId", "line\nbreak"),
        ("artifactId", 7),
        ("digest", "A" * 64),
        ("digest", "a" * 63),
        ("digest", "g" * 64),
        ("digest", None),
        ("mediaType", ""),
        ("mediaType", "png"),
        ("mediaType", "text/html\r\nSet-Cookie: a=b"),
        ("mediaType", 5),
        ("size", -1),
        ("size", 1.5),
        ("size", True),
        ("size", "12"),
        ("size", MAX_ARTIFACT_BYTES + 1),
    ],
)
def test_an_invalid_member_is_refused(member: str, value: object) -> None:
    with pytest.raises(ManifestInvalid):
        validate_manifest([{**GOOD, member: value}])


@pytest.mark.parametrize("member", ["artifactId", "digest", "mediaType", "size"])
def test_a_missing_member_is_refused(member: str) -> None:
    raw = {k: v for k, v in GOOD.items() if k != member}
    with pytest.raises(ManifestInvalid):
        validate_manifest([raw])


def test_duplicate_artifact_ids_are_refused() -> None:
    with pytest.raises(ManifestInvalid, match="unique"):
        validate_manifest([GOOD, {**GOOD, "digest": "b" * 64}])


@pytest.mark.parametrize("manifest", [None, {}, "x", [1], [[GOOD]]])
def test_a_manifest_that_is_not_a_list_of_objects_is_refused(manifest: object) -> None:
    with pytest.raises(ManifestInvalid):
        validate_manifest(manifest)


def test_the_longest_artifact_id_is_accepted() -> None:
    assert validate_manifest([{**GOOD, "artifactId": "x" * 128}])[0].artifact_id == "x" * 128
