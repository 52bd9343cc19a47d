"""Version contracts: validate the operator's input, compute digests, build the document."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mercato.catalog.errors import InvalidContract, InvalidVersionLabel
from mercato.core.canonical import digest_of
from mercato.protocol.manifest import (
    DIGEST_ALGORITHM,
    MANIFEST_MEMBER,
    MAX_MANIFEST_ENTRIES,
    MIN_MANIFEST_ENTRY_BYTES,
    entries_within,
)
from mercato.protocol.wire import ARTIFACTS_PATH_PREFIX

PROVIDER_OUTCOMES = ("SUCCEEDED", "DEFINED_FAILURE", "RETRYABLE_BEFORE_ACCEPT", "UNKNOWN_OUTCOME")
MAX_BODY_LIMIT = 64 * 1024 * 1024
MAX_VERSION_NUMBER = 999_999

_VERSION_LABEL = re.compile(r"v([1-9][0-9]{0,5})")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")

_REQUIRED = (
    "adapterRef",
    "installationConfigSchema",
    "providerOutcomes",
    "requestMaxBytes",
    "requestSchema",
    "requestShape",
    "responseMaxBytes",
    "resultSchema",
)
_OPTIONAL = ("presentationContractRef", "presentationContractDigest", "artifactContract")
_COMPUTED = (
    "serviceCode",
    "version",
    "adapterContractDigest",
    "installationConfigSchemaDigest",
    "requestSchemaDigest",
    "resultSchemaDigest",
    "contractDigest",
    "hasArtifactContract",
)
ARTIFACT_CONTRACT = "artifactContract"


@dataclass(frozen=True)
class BuiltContract:
    """A validated contract: the published document, its digest and the artifact contract."""

    document: dict[str, Any]
    contract_digest: str
    artifact_contract: dict[str, Any] | None

    @property
    def has_artifact_contract(self) -> bool:
        return self.artifact_contract is not None

    def stored(self) -> dict[str, Any]:
        """The JSON kept on the version row: the document plus the artifact contract, if any."""
        if self.artifact_contract is None:
            return dict(self.document)
        return {**self.document, ARTIFACT_CONTRACT: self.artifact_contract}


def parse_version_label(label: str) -> int:
    """Return the number of an exact label `v<number>` (no leading zeros, no aliases)."""
    match = _VERSION_LABEL.fullmatch(label)
    if match is None:
        raise InvalidVersionLabel(
            f"Version labels have the form v<number> (v1, v2, ...); got {label!r}."
        )
    return int(match.group(1))


def public_document(stored: dict[str, Any]) -> dict[str, Any]:
    """The caller-facing contract: the stored JSON without the artifact contract body."""
    return {k: v for k, v in stored.items() if k != ARTIFACT_CONTRACT}


def build_contract(raw: Any, *, service_code: str, version: str) -> BuiltContract:
    """Validate the operator's contract input and compute every digest."""
    if not isinstance(raw, dict):
        raise InvalidContract("The contract must be a JSON object.")
    _check_members(raw)
    adapter_ref = _string(raw, "adapterRef", allow_empty=False)
    presentation_ref = _string(raw, "presentationContractRef", default="")
    presentation_digest = _presentation_digest(raw, presentation_ref)
    schemas = {name: _schema(raw, name) for name in _SCHEMA_DIGESTS}
    request_shape = raw["requestShape"]
    if not isinstance(request_shape, dict):
        raise InvalidContract("requestShape must be a JSON object.")
    artifact = raw.get(ARTIFACT_CONTRACT)
    if artifact is not None and not isinstance(artifact, dict):
        raise InvalidContract("artifactContract must be a JSON object when present.")
    document: dict[str, Any] = {
        "serviceCode": service_code,
        "version": version,
        "adapterRef": adapter_ref,
        "adapterContractDigest": _digest({"adapterRef": adapter_ref}),
        "installationConfigSchema": schemas["installationConfigSchema"],
        "presentationContractRef": presentation_ref,
        "presentationContractDigest": presentation_digest,
        "providerOutcomes": _outcomes(raw["providerOutcomes"]),
        "requestMaxBytes": _limit(raw, "requestMaxBytes"),
        "requestSchema": schemas["requestSchema"],
        "requestShape": request_shape,
        "responseMaxBytes": _limit(raw, "responseMaxBytes"),
        "resultSchema": schemas["resultSchema"],
        "hasArtifactContract": artifact is not None,
    }
    for name, digest_member in _SCHEMA_DIGESTS.items():
        document[digest_member] = _digest(schemas[name])
    _digest(artifact)  # the artifact contract must be canonical JSON too
    if artifact is not None:
        _check_artifact_limits(artifact, document)
    contract_digest = _digest(document)
    document["contractDigest"] = contract_digest
    return BuiltContract(
        document=document, contract_digest=contract_digest, artifact_contract=artifact
    )


_SCHEMA_DIGESTS = {
    "installationConfigSchema": "installationConfigSchemaDigest",
    "requestSchema": "requestSchemaDigest",
    "resultSchema": "resultSchemaDigest",
}


def _check_members(raw: dict[str, Any]) -> None:
    computed = sorted(set(raw) & set(_COMPUTED))
    if computed:
        raise InvalidContract(
            f"Members computed by Mercato must not be given: {', '.join(computed)}."
        )
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise InvalidContract(f"Unknown contract members: {', '.join(unknown)}.")
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise InvalidContract(f"Missing contract members: {', '.join(missing)}.")


def _string(raw: dict[str, Any], name: str, *, allow_empty: bool = True, default: str = "") -> str:
    value = raw.get(name, default)
    if not isinstance(value, str) or len(value) > 500 or (not allow_empty and not value):
        raise InvalidContract(
            f"{name} must be a string of at most 500 characters"
            + ("" if allow_empty else ", not empty")
            + "."
        )
    return value


def _presentation_digest(raw: dict[str, Any], ref: str) -> str:
    digest = _string(raw, "presentationContractDigest", default="")
    if not ref:
        if digest:
            raise InvalidContract("presentationContractDigest must be empty without a reference.")
        return ""
    if _HEX_DIGEST.fullmatch(digest) is None:
        raise InvalidContract(
            "presentationContractDigest must be a lowercase hex SHA-256 when a "
            "presentationContractRef is given."
        )
    return digest


def _schema(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw[name]
    if not isinstance(value, dict):
        raise InvalidContract(f"{name} must be a JSON Schema object.")
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise InvalidContract(f"{name} is not a valid JSON Schema: {exc.message}") from exc
    return value


def _outcomes(value: Any) -> list[str]:
    if (
        not isinstance(value, list)
        or len(value) != len(PROVIDER_OUTCOMES)
        or set(value) != set(PROVIDER_OUTCOMES)
    ):
        raise InvalidContract(
            "providerOutcomes must list exactly the four outcomes: "
            + ", ".join(PROVIDER_OUTCOMES)
            + "."
        )
    return list(value)


# What the platform does with an artifact contract: the members a contract may state about it
# must say the same, or the version would advertise a mechanism the platform does not run.
_ARTIFACT_FACTS = {
    "manifestMember": MANIFEST_MEMBER,
    "digestAlgorithm": DIGEST_ALGORITHM,
    "fetch": f"GET {ARTIFACTS_PATH_PREFIX}{{digest}}",
}


def _check_artifact_limits(artifact: dict[str, Any], document: dict[str, Any]) -> None:
    """Refuse an artifact contract that declares what the platform would refuse (decision 0205)."""
    for name, platform_value in _ARTIFACT_FACTS.items():
        if name in artifact and artifact[name] != platform_value:
            raise InvalidContract(
                f"artifactContract.{name} must be {platform_value!r}: the platform supports "
                "nothing else."
            )
    declared = _manifest_schema(document["resultSchema"])
    for keyword in ("maxItems", "minItems"):
        value = declared.get(keyword)
        if isinstance(value, int) and value > MAX_MANIFEST_ENTRIES:
            raise InvalidContract(
                f"resultSchema allows {keyword} {value} artifacts; the platform accepts at most "
                f"{MAX_MANIFEST_ENTRIES} per call."
            )
    if "maxItems" not in declared and entries_within(document["responseMaxBytes"]) > (
        MAX_MANIFEST_ENTRIES
    ):
        raise InvalidContract(
            f"responseMaxBytes {document['responseMaxBytes']} lets a result carry more than "
            f"{MAX_MANIFEST_ENTRIES} artifacts, the most the platform accepts per call; declare "
            f"resultSchema.properties.{MANIFEST_MEMBER}.maxItems (at most "
            f"{MAX_MANIFEST_ENTRIES}) or a responseMaxBytes of at most "
            f"{MAX_MANIFEST_ENTRIES * MIN_MANIFEST_ENTRY_BYTES}."
        )


def _manifest_schema(result_schema: dict[str, Any]) -> dict[str, Any]:
    """The result schema's own subschema for the manifest member (empty when it has none)."""
    properties = result_schema.get("properties")
    member = properties.get(MANIFEST_MEMBER) if isinstance(properties, dict) else None
    return member if isinstance(member, dict) else {}


def _limit(raw: dict[str, Any], name: str) -> int:
    value = raw[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_BODY_LIMIT:
        raise InvalidContract(f"{name} must be an integer from 1 to {MAX_BODY_LIMIT}.")
    return int(value)


def _digest(value: Any) -> str:
    try:
        return digest_of(value)
    except Exception as exc:  # rfc8785 rejects non-finite floats and out-of-range integers
        raise InvalidContract(f"The contract is not canonicalisable JSON: {exc}") from exc
