"""The tools `/mcp` lists (DESIGN §12): one per callable version, read from the catalog on
every `tools/list`, plus `mercato_balance` and `mercato_receipt`."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from mcp import types

from mercato.catalog.callable_versions import CallableVersion, callable_versions
from mercato.core.cursors import decode_cursor, encode_cursor
from mercato.db.plans import AsyncConnection
from mercato.web.api.schemas import Balance, Receipt

BALANCE_TOOL = "mercato_balance"
RECEIPT_TOOL = "mercato_receipt"
PAGE_SIZE = 100
"""Version tools per `tools/list` page."""
MAX_NAMED_TOOLS = 100
"""At most this many names in `?tools=`."""
NAME_LIMIT = 64
_HASHED_NAME = re.compile(r"(.{55})-[0-9a-f]{8}")
_VERSION_NAME = re.compile(r"([a-z0-9_-]+)__(v[0-9]+)")
_HINTS = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_RECEIPT_ARGUMENTS: dict[str, Any] = {
    "type": "object",
    "properties": {"invocationId": {"type": "string", "minLength": 1, "maxLength": 64}},
    "required": ["invocationId"],
    "additionalProperties": False,
}
RETRY_NOTE = (
    'Send a key of your own in _meta["mercato/idempotencyKey"] and the same key on every '
    "retry: the call then runs and is charged at most once. Without one, a retry is a new "
    "call, charged again."
)


def tool_name(service_code: str, version: str) -> str:
    """`pixiv.daily-ranking` `v1` → `pixiv_daily-ranking__v1`; a name over 64 characters is its
    first 55, `-`, and the first 8 hex digits of the SHA-256 of the whole name."""
    name = f"{service_code.replace('.', '_')}__{version}"
    if len(name) <= NAME_LIMIT:
        return name
    return f"{name[:55]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True, slots=True)
class Narrowing:
    """What of the catalog a set of tool names can name: exact (service code, version) pairs
    for whole names, service-code prefixes for shortened ones."""

    exact: frozenset[tuple[str, int]]
    prefixes: frozenset[str]

    @staticmethod
    def of(names: set[str]) -> Narrowing:
        exact: set[tuple[str, int]] = set()
        prefixes: set[str] = set()
        for name in names:
            whole = version_of(name)
            if whole is not None:
                number = whole[1][1:]
                if len(number) <= 9:
                    exact.add((whole[0], int(number)))
                continue
            short = _HASHED_NAME.fullmatch(name)
            if short is not None:
                code_part = short.group(1).split("__", 1)[0]
                prefixes.add(code_part.replace("_", "."))
        return Narrowing(frozenset(exact), frozenset(prefixes))


def version_of(name: str) -> tuple[str, str] | None:
    """The (service code, version) a whole version tool name names, or None."""
    whole = _VERSION_NAME.fullmatch(name) if len(name) <= NAME_LIMIT else None
    if whole is None:
        return None
    return whole.group(1).replace("_", "."), whole.group(2)


def price_text(price: int) -> str:
    unit = "point" if price == 1 else "points"
    return f"{price} {unit} per successful call; a failed call costs nothing."


def version_tool(found: CallableVersion) -> types.Tool:
    """The tool of one callable version (DESIGN §12)."""
    result_schema = found.contract.get("resultSchema")
    is_object = isinstance(result_schema, dict) and result_schema.get("type") == "object"
    description = "\n\n".join(
        part for part in (found.description.strip(), price_text(found.price), RETRY_NOTE) if part
    )
    return types.Tool(
        name=tool_name(found.service_code, found.version),
        title=f"{found.display_name} {found.version}",
        description=description,
        input_schema=found.contract.get("requestSchema") or {"type": "object"},
        output_schema=result_schema if is_object else None,
        annotations=_HINTS,
        _meta={
            "mercato/serviceCode": found.service_code,
            "mercato/version": found.version,
            "mercato/price": found.price,
            "mercato/contractDigest": found.contract_digest,
        },
    )


def account_tools() -> list[types.Tool]:
    """`mercato_balance` and `mercato_receipt`: free, and changing nothing."""
    reading = types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    return [
        types.Tool(
            name=BALANCE_TOOL,
            title="Points balance",
            description="Your available and reserved points. Free.",
            input_schema=_NO_ARGUMENTS,
            output_schema=Balance.model_json_schema(),
            annotations=reading,
        ),
        types.Tool(
            name=RECEIPT_TOOL,
            title="Receipt of a call",
            description=(
                "The receipt of one of your calls by its invocationId (from a tool result's "
                '_meta["mercato/invocationId"]): its status, settlement and what it cost. '
                "Read it when a call's outcome is pending, instead of calling again. Free."
            ),
            input_schema=_RECEIPT_ARGUMENTS,
            output_schema=Receipt.model_json_schema(),
            annotations=reading,
        ),
    ]


def _after(cursor: str | None) -> tuple[str, int] | None:
    if cursor is None:
        return None
    key = decode_cursor(cursor)
    code, _, number = (key or "").rpartition("\n")
    if not code or not number.isdigit() or len(number) > 9:
        raise ValueError("The cursor is not valid.")
    return code, int(number)


async def list_page(
    conn: AsyncConnection, *, cursor: str | None, names: set[str] | None
) -> types.ListToolsResult:
    """One page of the tool list, read from the catalog as it stands now; `names` (from
    `?tools=`) keeps only those tools. ValueError for a cursor this list never gave out."""
    after = _after(cursor)
    narrowing = None if names is None else Narrowing.of(names)
    found, more = await callable_versions.aio(
        conn,
        limit=PAGE_SIZE,
        after=after,
        exact=None if narrowing is None else narrowing.exact,
        code_prefixes=frozenset() if narrowing is None else narrowing.prefixes,
    )
    tools = [version_tool(version) for version in found]
    if after is None:
        tools = [*account_tools(), *tools]
    if names is not None:
        tools = [tool for tool in tools if tool.name in names]
    next_cursor = None
    if more and found:
        last = found[-1]
        next_cursor = encode_cursor(f"{last.service_code}\n{last.number}")
    return types.ListToolsResult(tools=tools, next_cursor=next_cursor)


async def find_shortened(conn: AsyncConnection, name: str) -> tuple[str, str] | None:
    """The (service code, version) of a shortened version tool name (`version_of` reads a whole
    one), found among the callable versions its first 55 characters can name."""
    narrowing = Narrowing.of({name})
    if not narrowing.prefixes:
        return None
    after: tuple[str, int] | None = None
    while True:
        found, more = await callable_versions.aio(
            conn, limit=PAGE_SIZE, after=after, exact=frozenset(), code_prefixes=narrowing.prefixes
        )
        for version in found:
            if tool_name(version.service_code, version.version) == name:
                return version.service_code, version.version
        if not more or not found:
            return None
        after = (found[-1].service_code, found[-1].number)
