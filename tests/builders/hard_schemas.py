"""The worst JSON schemas we could build for the validation engine (issue 39 item 1), and
bodies that make them work hardest: catastrophic regular expressions, `uniqueItems` over 64 KiB
of objects, deep `$ref` chains, `anyOf` / `oneOf` fan-out. Each is a schema of one member, so
one instance can carry the hard part of all of them (`hard_instance`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from builders.catalog import example_contract, facts
from mercato.catalog import service as catalog
from mercato.catalog.models import Version
from mercato.db.runtime import Runtime

CATASTROPHIC = "^(a+)+$"  # Python's `re`: time doubles with each "a" before the "!"
FAN_OUT_LEVELS = 40  # 2**40 paths through `anyOf`, 3**30 through `oneOf`
REF_CHAIN = 3_000


def regex_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"text": {"type": "string", "pattern": CATASTROPHIC}},
    }


def pattern_properties_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"keys": {"patternProperties": {"^(a|aa)+$": {"type": "integer"}}}},
    }


def unique_items_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}


def any_of_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
        for i in range(FAN_OUT_LEVELS)
    }
    defs[f"a{FAN_OUT_LEVELS}"] = {"type": "string"}
    return {"$defs": defs, "type": "object", "properties": {"n": {"$ref": "#/$defs/a0"}}}


def one_of_schema() -> dict[str, Any]:
    levels = 30
    defs: dict[str, Any] = {
        f"o{i}": {"oneOf": [{"$ref": f"#/$defs/o{i + 1}"}] * 3} for i in range(levels)
    }
    defs[f"o{levels}"] = {"type": "string"}
    return {"$defs": defs, "type": "object", "properties": {"n": {"$ref": "#/$defs/o0"}}}


def ref_chain_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {f"c{i}": {"$ref": f"#/$defs/c{i + 1}"} for i in range(REF_CHAIN)}
    defs[f"c{REF_CHAIN}"] = {"type": "string"}
    return {"$defs": defs, "type": "object", "properties": {"n": {"$ref": "#/$defs/c0"}}}


HARD_SCHEMAS = {
    "regex": regex_schema,
    "pattern-properties": pattern_properties_schema,
    "unique-items": unique_items_schema,
    "any-of": any_of_schema,
    "one-of": one_of_schema,
    "ref-chain": ref_chain_schema,
}
# What each asks of a body or result that carries `hard_instance`: a violation found (in time
# linear in the instance), or no judgement within the deadline.
JUDGED = ("regex", "pattern-properties", "unique-items")
TOO_COMPLEX = ("any-of", "one-of", "ref-chain")


def unique_objects(size: int = 60_000) -> list[dict[str, Any]]:
    """Distinct objects filling about `size` bytes of JSON, the last equal to the first with
    its members in another order (so a check must compare them all)."""
    items: list[dict[str, Any]] = []
    length = 0
    while length < size:
        item = {"id": len(items), "name": f"item-{len(items)}", "tags": ["x", "y"]}
        items.append(item)
        length += 45
    items.append({"tags": ["x", "y"], "name": "item-0", "id": 0})
    return items


def hard_instance() -> dict[str, Any]:
    """One value that makes every schema of `HARD_SCHEMAS` work hardest, in under 64 KiB of
    JSON: its `text` and a key defeat the regular expressions (Python's `re` would take years),
    its `items` are about 50 KB of objects with one duplicate at the end, and its `n` sends
    the fan-outs and the chain down every path."""
    return {
        "text": "a" * 10_000 + "!",
        "keys": {"a" * 40 + "!": 1, "aaaa": "not an integer"},
        "items": unique_objects(44_000),
        "n": 1,
    }


def publish_legacy(
    runtime: Runtime,
    connection_id: str,
    *,
    owner_id: str,
    service_code: str,
    request_schema: dict[str, Any],
) -> str:
    """A version as published before patterns had to be RE2 (DESIGN.md §7): its draft's row
    is given the request schema it was accepted with, then it is published (publishing does
    not check the contract again). Returns its id."""
    connection = facts(runtime, connection_id)
    now = runtime.clock.now()
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session,
            service_code=service_code,
            display_name="Legacy",
            description="",
            owner_id=owner_id,
            provider_share_bps=7000,
            now=now,
        )
        draft = catalog.create_draft(
            session,
            listing_id=listing.id,
            version="v1",
            connection=connection,
            price=10,
            contract=example_contract(artifactContract=None),
            now=now,
        )
        contract = {**draft.contract, "requestSchema": request_schema}
        session.execute(update(Version).where(Version.id == draft.id).values(contract=contract))
        session.expire_all()
        catalog.publish_version(session, version_id=draft.id, connection=connection, now=now)
        return draft.id
