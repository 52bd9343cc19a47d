"""The contract document's own JSON Schema, and the JSON-pointer errors of a contract input.

`CONTRACT_SCHEMA` is what `GET /v1/schemas/contract` serves and what docs/provider-guide.md
describes: the members a provider writes (spec 2.2 without serviceCode, version and the digests,
which Mercato computes). `contract_errors` names every bad member by JSON pointer, including each
bad keyword inside the three embedded schemas, which must be valid JSON Schema 2020-12 whose
`pattern`s and `patternProperties` keys RE2 compiles.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from mercato.core.schema_engine import pattern_problems
from mercato.protocol.manifest import DIGEST_ALGORITHM, MANIFEST_MEMBER, MAX_MANIFEST_ENTRIES
from mercato.protocol.wire import ARTIFACTS_PATH_PREFIX

PROVIDER_OUTCOMES = ("SUCCEEDED", "DEFINED_FAILURE", "RETRYABLE_BEFORE_ACCEPT", "UNKNOWN_OUTCOME")
MAX_BODY_LIMIT = 64 * 1024 * 1024
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_MEMBERS = ("installationConfigSchema", "requestSchema", "resultSchema")
COMPUTED_MEMBERS = (
    "serviceCode",
    "version",
    "adapterContractDigest",
    "installationConfigSchemaDigest",
    "requestSchemaDigest",
    "resultSchemaDigest",
    "contractDigest",
    "hasArtifactContract",
)
_MAX_ERRORS = 50

_BODY_LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_BODY_LIMIT}
_EMBEDDED_SCHEMA = {
    "type": "object",
    "description": "A JSON Schema (draft 2020-12) in object form; `$schema`, when given, must "
    f"be {DIALECT}.",
}

CONTRACT_SCHEMA: dict[str, Any] = {
    "$schema": DIALECT,
    "$id": "/v1/schemas/contract",
    "title": "Mercato version contract",
    "description": "What a provider writes for one version (spec 2.2 without serviceCode, "
    "version and the digests, which Mercato computes).",
    "type": "object",
    "required": [
        "adapterRef",
        "installationConfigSchema",
        "providerOutcomes",
        "requestMaxBytes",
        "requestSchema",
        "requestShape",
        "responseMaxBytes",
        "resultSchema",
    ],
    "additionalProperties": False,
    "properties": {
        "adapterRef": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "The adapter that speaks to the provider, e.g. vetted.http-json/v1.",
        },
        "installationConfigSchema": _EMBEDDED_SCHEMA,
        "presentationContractRef": {"type": "string", "maxLength": 500},
        "presentationContractDigest": {
            "type": "string",
            "pattern": "^([0-9a-f]{64})?$",
            "description": "Lowercase hex SHA-256; required exactly when a reference is given.",
        },
        "providerOutcomes": {
            "type": "array",
            "items": {"enum": list(PROVIDER_OUTCOMES)},
            "minItems": 4,
            "maxItems": 4,
            "uniqueItems": True,
            "description": "Exactly the four outcomes, in any order.",
        },
        "requestMaxBytes": _BODY_LIMIT,
        "requestSchema": _EMBEDDED_SCHEMA,
        "requestShape": {
            "type": "object",
            "description": "A human-readable sketch of the request, shown in the catalog.",
        },
        "responseMaxBytes": _BODY_LIMIT,
        "resultSchema": _EMBEDDED_SCHEMA,
        "artifactContract": {
            "type": "object",
            "description": "Present when results carry artifacts that the platform pulls.",
            "properties": {
                "fetch": {"const": f"GET {ARTIFACTS_PATH_PREFIX}{{digest}}"},
                "digestAlgorithm": {"const": DIGEST_ALGORITHM},
                "manifestMember": {"const": MANIFEST_MEMBER},
                "mediaTypes": {"type": "array", "items": {"type": "string", "maxLength": 200}},
            },
        },
    },
}

_CONTRACT_VALIDATOR = Draft202012Validator(CONTRACT_SCHEMA)
_META_VALIDATOR = Draft202012Validator(Draft202012Validator.META_SCHEMA)


def pointer(*parts: Any) -> str:
    """The RFC 6901 JSON pointer of a path."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _located(error: ValidationError) -> list[dict[str, str]]:
    """One error per bad member: an unexpected or missing member is named itself."""
    path = list(error.absolute_path)
    instance = error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = set(error.schema.get("properties", {}))
        found = []
        for name in sorted(set(instance) - allowed):
            why = "computed by Mercato: do not give it" if name in COMPUTED_MEMBERS else "unknown"
            found.append({"pointer": pointer(*path, name), "detail": f"{name} is {why}"})
        return found
    if error.validator == "required" and isinstance(instance, dict):
        return [
            {"pointer": pointer(*path, name), "detail": f"{name} is required"}
            for name in error.validator_value
            if name not in instance
        ]
    return [{"pointer": pointer(*path), "detail": error.message[:300]}]


def _schema_errors(name: str, schema: dict[str, Any]) -> list[dict[str, str]]:
    dialect = schema.get("$schema", DIALECT)
    if dialect != DIALECT:
        return [{"pointer": pointer(name, "$schema"), "detail": f"must be {DIALECT}"}]
    found = [
        {"pointer": pointer(name, *e.absolute_path), "detail": e.message[:300]}
        for e in _META_VALIDATOR.iter_errors(schema)
    ]
    # Patterns are RE2: linear time whatever the string (DESIGN.md §7, decision 0515).
    return found + pattern_problems(schema, (name,))


def contract_errors(raw: Any) -> list[dict[str, str]]:
    """Every way `raw` breaks the contract schema, each named by JSON pointer; [] when valid."""
    found: list[dict[str, str]] = []
    for error in _CONTRACT_VALIDATOR.iter_errors(raw):
        found.extend(_located(error))
    if isinstance(raw, dict):
        for name in SCHEMA_MEMBERS:
            if isinstance(raw.get(name), dict):
                found.extend(_schema_errors(name, raw[name]))
        found.extend(_presentation_errors(raw))
        found.extend(_artifact_errors(raw))
    unique = {(e["pointer"], e["detail"]): e for e in found}
    return sorted(unique.values(), key=lambda e: e["pointer"])[:_MAX_ERRORS]


def _presentation_errors(raw: dict[str, Any]) -> list[dict[str, str]]:
    ref, digest = raw.get("presentationContractRef", ""), raw.get("presentationContractDigest", "")
    if not isinstance(ref, str) or not isinstance(digest, str):
        return []
    if not ref and digest:
        return [
            {
                "pointer": "/presentationContractDigest",
                "detail": "must be empty without a presentationContractRef",
            }
        ]
    if ref and not digest:
        return [
            {
                "pointer": "/presentationContractDigest",
                "detail": "a lowercase hex SHA-256 is required with a presentationContractRef",
            }
        ]
    return []


def _artifact_errors(raw: dict[str, Any]) -> list[dict[str, str]]:
    """An artifact contract must not let a result carry more artifacts than the platform takes
    per call (decision 0205)."""
    if not isinstance(raw.get("artifactContract"), dict):
        return []
    result = raw.get("resultSchema")
    properties = result.get("properties") if isinstance(result, dict) else None
    declared = properties.get(MANIFEST_MEMBER) if isinstance(properties, dict) else None
    declared = declared if isinstance(declared, dict) else {}
    found = []
    for keyword in ("maxItems", "minItems"):
        value = declared.get(keyword)
        if isinstance(value, int) and value > MAX_MANIFEST_ENTRIES:
            found.append(
                {
                    "pointer": pointer("resultSchema", "properties", MANIFEST_MEMBER, keyword),
                    "detail": f"at most {MAX_MANIFEST_ENTRIES} artifacts per call are accepted",
                }
            )
    return found
