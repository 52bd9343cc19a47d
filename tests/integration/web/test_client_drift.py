"""The caller client's own models (httpx only: it cannot import the platform's Pydantic models)
against the OpenAPI document the platform generates from its routes: member names, required-ness
and types must agree, and every problem code the client maps to a class must be documented with a
status of that class. Change one side without the other and this fails (decision 0287).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import types
import typing
from typing import Any

import pytest

from mercato.client import errors as client_errors
from mercato.client import models as client
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app
from mercato.web.openapi import build_document

REST = {"*"}  # the client keeps the members it does not model in a `document` field
# Members the client reads as empty when absent or null (the wire may omit them or send null).
ABSENT_IS_EMPTY = {("InvokeSuccess", "artifacts"), ("InvokeSuccess", "result")}
# Members the wire always sends that the client nevertheless accepts as None (it parses them
# leniently). Listed, so that either side changing its mind is noticed.
CLIENT_TOLERATES_NULL = {("VersionDocument", "publishedAt"), ("RateLimitStatus", "resetAt")}
# client class -> (schema name, client fields not on the wire, wire members the client ignores)
PAIRS: dict[type[Any], tuple[str, set[str], set[str]]] = {
    client.VersionSummary: ("VersionSummary", set(), set()),
    client.ListingSummary: ("ListingSummary", set(), set()),
    client.Listing: ("ListingDocument", set(), set()),
    client.Version: ("VersionDocument", set(), set()),
    # `document` is the whole served object, kept for members the client does not model.
    client.Contract: ("ContractDocument", {"document"}, REST),
    client.InvocationResult: ("InvokeSuccess", {"idempotency_key"}, set()),
    client.Resolution: ("Resolution", set(), set()),
    client.Receipt: ("Receipt", set(), set()),
    client.RateLimit: ("RateLimitStatus", set(), set()),
    client.Balance: ("Balance", set(), set()),
    # The manifest entry is an open object; the client also reads two optional members.
    client.ArtifactEntry: ("ArtifactEntry", {"media_type", "size"}, set()),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _client_kinds(annotation: Any) -> tuple[set[str], bool]:
    """(JSON types, nullable) of a client field's annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        nullable = False
        for arm in typing.get_args(annotation):
            if arm is type(None):
                nullable = True
            else:
                arm_kinds, _ = _client_kinds(arm)
                kinds |= arm_kinds
        return kinds, nullable
    if origin in (tuple, list) or annotation in (tuple, list):
        return {"array"}, False
    if origin is dict or annotation is dict or dataclasses.is_dataclass(annotation):
        return {"object"}, False
    simple = {str: "string", int: "integer", bool: "boolean", dt.datetime: "string"}
    return {simple[annotation]}, False


def _wire_kinds(prop: dict[str, Any]) -> tuple[set[str], bool]:
    if "anyOf" in prop:
        kinds: set[str] = set()
        nullable = False
        for arm in prop["anyOf"]:
            arm_kinds, arm_nullable = _wire_kinds(arm)
            kinds |= arm_kinds
            nullable = nullable or arm_nullable
        return kinds, nullable
    if "$ref" in prop:
        return {"object"}, False
    kind = prop.get("type")
    if kind is None:
        return {"object", "array", "string", "integer", "boolean", "number"}, True  # any JSON
    return ({kind} - {"null"}), kind == "null"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_app(Runtime.from_settings(Settings(env="dev", database_url="sqlite://")))
    return build_document(app)


@pytest.mark.parametrize("model", list(PAIRS), ids=lambda m: m.__name__)
def test_client_model_matches_the_generated_schema(document: dict[str, Any], model: Any) -> None:
    name, client_only, ignored = PAIRS[model]
    schema = document["components"]["schemas"][name]
    properties: dict[str, Any] = schema["properties"]
    required = set(schema.get("required", []))
    hints = typing.get_type_hints(model)
    fields = {_camel(f.name): f.name for f in dataclasses.fields(model)}
    modelled = {wire for wire, py in fields.items() if py not in client_only}
    expected = modelled & set(properties) if ignored == REST else set(properties) - ignored
    assert modelled == expected, (name, modelled ^ expected)
    for wire in modelled:
        client_types, client_nullable = _client_kinds(hints[fields[wire]])
        wire_types, wire_nullable = _wire_kinds(properties[wire])
        if not wire_types >= {"object", "array", "string"}:  # not "any JSON"
            assert client_types == wire_types, (name, wire, client_types, wire_types)
        may_be_absent = wire_nullable or wire not in required
        if (name, wire) in ABSENT_IS_EMPTY:
            assert may_be_absent and not client_nullable, (name, wire)
            continue
        if (name, wire) in CLIENT_TOLERATES_NULL:
            assert client_nullable and not may_be_absent, (name, wire)
            continue
        assert client_nullable == may_be_absent, (name, wire, client_nullable, may_be_absent)
    for py in client_only:
        # A client-only field that is read from the wire must be optional there (open object).
        wire = _camel(py)
        if wire not in properties and schema.get("additionalProperties") is True:
            assert _client_kinds(hints[py])[1], (name, py)


def test_every_client_error_code_is_documented_with_its_status(document: dict[str, Any]) -> None:
    documented: dict[str, set[int]] = {}
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                if status[0] in "45":
                    for code in re.findall(r"`([A-Z_]+)`", answer["description"]):
                        documented.setdefault(code, set()).add(int(status))
    by_code = client_errors._BY_CODE
    by_status = client_errors._BY_STATUS
    for code, cls in by_code.items():
        assert code in documented, f"the client maps {code}, which no route documents"
        for status in documented[code]:
            family = by_status.get(status, client_errors.ServerError)
            assert issubclass(cls, family), (code, status, cls, family)
