"""Contract input validation and digests (spec 2.2, DESIGN §6)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from builders.catalog import EXAMPLE_CONTRACT, example_contract
from mercato.catalog.contracts import (
    MAX_BODY_LIMIT,
    build_contract,
    parse_version_label,
    public_document,
)
from mercato.catalog.errors import InvalidContract, InvalidVersionLabel
from mercato.catalog.examples import example_contract as packaged_example
from mercato.core.canonical import digest_of
from mercato.protocol.manifest import MAX_MANIFEST_ENTRIES, MIN_MANIFEST_ENTRY_BYTES, entries_within

SPEC_MEMBERS = {
    "serviceCode",
    "version",
    "adapterRef",
    "adapterContractDigest",
    "installationConfigSchema",
    "installationConfigSchemaDigest",
    "presentationContractRef",
    "presentationContractDigest",
    "providerOutcomes",
    "requestMaxBytes",
    "requestSchema",
    "requestSchemaDigest",
    "requestShape",
    "responseMaxBytes",
    "resultSchema",
    "resultSchemaDigest",
}


def test_packaged_example_is_the_test_example() -> None:
    assert packaged_example() == EXAMPLE_CONTRACT


def test_example_builds_with_every_digest_recomputable() -> None:
    built = build_contract(example_contract(), service_code="pixiv.daily-ranking", version="v1")
    doc = built.document
    assert set(doc) == SPEC_MEMBERS | {"contractDigest", "hasArtifactContract"}
    assert doc["adapterContractDigest"] == digest_of({"adapterRef": "vetted.http-json/v1"})
    assert doc["installationConfigSchemaDigest"] == digest_of(
        {"type": "object", "properties": {}, "additionalProperties": False}
    )
    assert doc["requestSchemaDigest"] == digest_of(EXAMPLE_CONTRACT["requestSchema"])
    assert doc["resultSchemaDigest"] == digest_of({"type": "object", "additionalProperties": True})
    without = {k: v for k, v in doc.items() if k != "contractDigest"}
    assert doc["contractDigest"] == built.contract_digest == digest_of(without)
    assert doc["hasArtifactContract"] is True
    assert built.stored()["artifactContract"] == EXAMPLE_CONTRACT["artifactContract"]
    assert public_document(built.stored()) == doc


def test_digests_are_lowercase_sha256_hex() -> None:
    doc = build_contract(example_contract(), service_code="a.b", version="v1").document
    for name in [k for k in doc if k.endswith("Digest") and k != "presentationContractDigest"]:
        assert len(doc[name]) == 64 and doc[name] == doc[name].lower()
        int(doc[name], 16)


def test_without_artifact_contract() -> None:
    built = build_contract(
        example_contract(artifactContract=None), service_code="a.b", version="v1"
    )
    assert built.document["hasArtifactContract"] is False
    assert "artifactContract" not in built.stored()


def test_defaults_for_presentation_members() -> None:
    raw = example_contract(presentationContractRef=None, presentationContractDigest=None)
    doc = build_contract(raw, service_code="a.b", version="v1").document
    assert doc["presentationContractRef"] == "" and doc["presentationContractDigest"] == ""


def test_contract_digest_changes_with_any_member() -> None:
    base = build_contract(example_contract(), service_code="a.b", version="v1").contract_digest
    changed = [
        build_contract(example_contract(requestMaxBytes=65535), service_code="a.b", version="v1"),
        build_contract(example_contract(), service_code="a.b", version="v2"),
        build_contract(example_contract(), service_code="a.c", version="v1"),
        build_contract(example_contract(requestShape={}), service_code="a.b", version="v1"),
    ]
    assert all(c.contract_digest != base for c in changed)


BROKEN: list[tuple[str, Any]] = [
    ("not an object", ["adapterRef"]),
    ("missing adapterRef", example_contract(adapterRef=None)),
    ("empty adapterRef", example_contract(adapterRef="")),
    ("unknown member", {**example_contract(), "extra": 1}),
    ("computed member given", {**example_contract(), "contractDigest": "0" * 64}),
    ("serviceCode given", {**example_contract(), "serviceCode": "x.y"}),
    ("schema digest given", {**example_contract(), "requestSchemaDigest": "0" * 64}),
    ("invalid request schema", example_contract(requestSchema={"type": "nonsense"})),
    ("boolean result schema", example_contract(resultSchema=True)),
    ("invalid installation schema", example_contract(installationConfigSchema={"properties": 3})),
    (
        "three outcomes",
        example_contract(providerOutcomes=["SUCCEEDED", "DEFINED_FAILURE", "UNKNOWN_OUTCOME"]),
    ),
    ("duplicate outcome", example_contract(providerOutcomes=["SUCCEEDED"] * 4)),
    (
        "unknown outcome",
        example_contract(
            providerOutcomes=["SUCCEEDED", "DEFINED_FAILURE", "UNKNOWN_OUTCOME", "MAYBE"]
        ),
    ),
    ("zero request limit", example_contract(requestMaxBytes=0)),
    ("negative response limit", example_contract(responseMaxBytes=-1)),
    ("boolean limit", example_contract(requestMaxBytes=True)),
    ("float limit", example_contract(responseMaxBytes=1.5)),
    ("requestShape not object", example_contract(requestShape="chart")),
    ("artifact contract not object", example_contract(artifactContract=["x"])),
    ("presentation digest without ref", example_contract(presentationContractDigest="a" * 64)),
    ("presentation ref without digest", example_contract(presentationContractRef="p/1")),
    (
        "presentation digest not hex",
        example_contract(presentationContractRef="p/1", presentationContractDigest="XYZ"),
    ),
    ("non-finite number", example_contract(requestShape={"x": float("nan")})),
]


@pytest.mark.parametrize(("case", "raw"), BROKEN, ids=[case for case, _ in BROKEN])
def test_broken_contracts_are_refused(case: str, raw: Any) -> None:
    with pytest.raises(InvalidContract) as caught:
        build_contract(raw, service_code="a.b", version="v1")
    assert caught.value.code == "INVALID_CONTRACT" and caught.value.status == 422


def test_presentation_contract_with_ref_and_digest() -> None:
    raw = example_contract(presentationContractRef="cards/v1", presentationContractDigest="a" * 64)
    doc = build_contract(raw, service_code="a.b", version="v1").document
    assert doc["presentationContractDigest"] == "a" * 64


@pytest.mark.parametrize(
    ("label", "number"), [("v1", 1), ("v2", 2), ("v10", 10), ("v999999", 999999)]
)
def test_version_labels(label: str, number: int) -> None:
    assert parse_version_label(label) == number


@pytest.mark.parametrize(
    "label",
    ["latest", "v0", "v01", "V1", "1", "v1.0", "v", "v-1", " v1", "v1 ", "v1000000", "stable"],
)
def test_aliases_and_malformed_labels_are_refused(label: str) -> None:
    with pytest.raises(InvalidVersionLabel):
        parse_version_label(label)


def _manifest_schema(**artifacts: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"artifacts": {"type": "array", **artifacts}}}


# Contracts whose declared limits contradict what the platform enforces (decision 0205).
CONTRADICTING = [
    ("response limit over the platform's", example_contract(responseMaxBytes=MAX_BODY_LIMIT + 1)),
    ("request limit over the platform's", example_contract(requestMaxBytes=MAX_BODY_LIMIT + 1)),
    (
        "unbounded manifest in a response too large for the cap",
        example_contract(responseMaxBytes=(MAX_MANIFEST_ENTRIES + 1) * MIN_MANIFEST_ENTRY_BYTES),
    ),
    (
        "manifest maxItems over the cap",
        example_contract(resultSchema=_manifest_schema(maxItems=MAX_MANIFEST_ENTRIES + 1)),
    ),
    (
        "manifest minItems over the cap",
        example_contract(resultSchema=_manifest_schema(minItems=MAX_MANIFEST_ENTRIES + 1)),
    ),
    (
        "another manifest member",
        example_contract(artifactContract={"manifestMember": "files"}),
    ),
    ("another digest", example_contract(artifactContract={"digestAlgorithm": "sha512"})),
    ("another fetch path", example_contract(artifactContract={"fetch": "GET /blobs/{digest}"})),
]


@pytest.mark.parametrize(("case", "raw"), CONTRADICTING, ids=[c for c, _ in CONTRADICTING])
def test_contracts_contradicting_the_platform_are_refused(case: str, raw: Any) -> None:
    with pytest.raises(InvalidContract) as caught:
        build_contract(raw, service_code="a.b", version="v1")
    assert caught.value.code == "INVALID_CONTRACT" and caught.value.status == 422


@pytest.mark.parametrize(
    "raw",
    [
        example_contract(responseMaxBytes=MAX_MANIFEST_ENTRIES * MIN_MANIFEST_ENTRY_BYTES),
        example_contract(
            responseMaxBytes=MAX_BODY_LIMIT,
            resultSchema=_manifest_schema(maxItems=MAX_MANIFEST_ENTRIES),
        ),
        example_contract(responseMaxBytes=MAX_BODY_LIMIT, artifactContract=None),
    ],
    ids=["largest unbounded response", "bounded manifest", "no artifact contract"],
)
def test_contracts_within_the_platform_limits_build(raw: dict[str, Any]) -> None:
    build_contract(raw, service_code="a.b", version="v1")


def test_a_response_within_the_spec_limit_never_carries_more_than_the_cap() -> None:
    assert entries_within(262144) <= MAX_MANIFEST_ENTRIES
    smallest = {"artifactId": "a", "digest": "0" * 64, "mediaType": "a/b", "size": 0}
    assert len(orjson.dumps(smallest)) + len(b",") == MIN_MANIFEST_ENTRY_BYTES
