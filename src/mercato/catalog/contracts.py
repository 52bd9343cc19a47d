"""Version contracts: validate the provider's input, compute digests, build the document."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mercato.catalog.contract_schema import MAX_BODY_LIMIT, PROVIDER_OUTCOMES, contract_errors
from mercato.catalog.errors import InvalidContract, InvalidVersionLabel
from mercato.core.canonical import digest_of
from mercato.protocol.manifest import (
    MANIFEST_MEMBER,
    MAX_MANIFEST_ENTRIES,
    MIN_MANIFEST_ENTRY_BYTES,
    entries_within,
)

MAX_VERSION_NUMBER = 999_999

_VERSION_LABEL = re.compile(r"v([1-9][0-9]{0,5})")
ARTIFACT_CONTRACT = "artifactContract"
__all__ = [
    "ARTIFACT_CONTRACT",
    "MAX_BODY_LIMIT",
    "PROVIDER_OUTCOMES",
    "BuiltContract",
    "build_contract",
    "contract_input",
    "parse_version_label",
    "public_document",
]


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
    """Validate the provider's contract input (every bad member named by JSON pointer, see
    `contract_schema`) and compute every digest."""
    errors = contract_errors(raw)
    if errors:
        first = errors[0]
        raise InvalidContract(
            f"The contract is not valid: {first['pointer'] or '/'} {first['detail']}"
            + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
            + ".",
            errors=errors,
        )
    adapter_ref = raw["adapterRef"]
    presentation_ref = raw.get("presentationContractRef", "")
    schemas = {name: raw[name] for name in _SCHEMA_DIGESTS}
    artifact = raw.get(ARTIFACT_CONTRACT)
    document: dict[str, Any] = {
        "serviceCode": service_code,
        "version": version,
        "adapterRef": adapter_ref,
        "adapterContractDigest": _digest({"adapterRef": adapter_ref}),
        "installationConfigSchema": schemas["installationConfigSchema"],
        "presentationContractRef": presentation_ref,
        "presentationContractDigest": raw.get("presentationContractDigest", ""),
        "providerOutcomes": list(raw["providerOutcomes"]),
        "requestMaxBytes": raw["requestMaxBytes"],
        "requestSchema": schemas["requestSchema"],
        "requestShape": raw["requestShape"],
        "responseMaxBytes": raw["responseMaxBytes"],
        "resultSchema": schemas["resultSchema"],
        "hasArtifactContract": artifact is not None,
    }
    for name, digest_member in _SCHEMA_DIGESTS.items():
        document[digest_member] = _digest(schemas[name])
    _digest(artifact)  # the artifact contract must be canonical JSON too
    if artifact is not None:
        _check_artifact_limits(document)
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


def _check_artifact_limits(document: dict[str, Any]) -> None:
    """Refuse an artifact contract whose responses could carry more artifacts than the platform
    accepts per call when the result schema does not bound them (decision 0205)."""
    declared = _manifest_schema(document["resultSchema"])
    if "maxItems" not in declared and entries_within(document["responseMaxBytes"]) > (
        MAX_MANIFEST_ENTRIES
    ):
        detail = (
            f"lets a result carry more than {MAX_MANIFEST_ENTRIES} artifacts, the most the "
            f"platform accepts per call; declare resultSchema.properties.{MANIFEST_MEMBER}."
            f"maxItems (at most {MAX_MANIFEST_ENTRIES}) or a responseMaxBytes of at most "
            f"{MAX_MANIFEST_ENTRIES * MIN_MANIFEST_ENTRY_BYTES}"
        )
        raise InvalidContract(
            f"responseMaxBytes {document['responseMaxBytes']} {detail}.",
            errors=[{"pointer": "/responseMaxBytes", "detail": detail}],
        )


def _manifest_schema(result_schema: dict[str, Any]) -> dict[str, Any]:
    """The result schema's own subschema for the manifest member (empty when it has none)."""
    properties = result_schema.get("properties")
    member = properties.get(MANIFEST_MEMBER) if isinstance(properties, dict) else None
    return member if isinstance(member, dict) else {}


def _digest(value: Any) -> str:
    try:
        return digest_of(value)
    except Exception as exc:  # rfc8785 rejects non-finite floats and out-of-range integers
        raise InvalidContract(
            f"The contract is not canonicalisable JSON: {exc}",
            errors=[{"pointer": "", "detail": f"not canonicalisable JSON: {exc}"}],
        ) from exc


_DERIVED = frozenset(
    {
        "serviceCode",
        "version",
        "adapterContractDigest",
        "installationConfigSchemaDigest",
        "requestSchemaDigest",
        "resultSchemaDigest",
        "contractDigest",
        "hasArtifactContract",
    }
)


def contract_input(stored: dict[str, Any]) -> dict[str, Any]:
    """The provider's own contract input back from a stored contract (no computed members)."""
    return {k: v for k, v in stored.items() if k not in _DERIVED}
