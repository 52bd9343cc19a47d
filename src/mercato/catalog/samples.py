"""A version's examples: a request and its result that the provider supplies beside the contract,
shown on the listing page. Judged against the version's own schemas and size limits when they
are set, so a page never shows what a call could not send or receive (decision 0561)."""

from __future__ import annotations

from typing import Any, NoReturn

from mercato.catalog.errors import InvalidExample
from mercato.core import schema_engine
from mercato.core.canonical import canonical_json

MAX_EXAMPLES = 3
# CPU seconds one example may take to judge; the schemas are the provider's own, RE2 only.
_JUDGE_SECONDS = 0.5


def check_examples(examples: Any, document: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Return `examples` ([{"request", "result"}], 1-3 items) when each matches the contract
    `document` (schemas and byte limits); None stays None. Refused: INVALID_EXAMPLE with
    JSON pointers into `examples`."""
    if examples is None:
        return None
    if not isinstance(examples, list) or not 1 <= len(examples) <= MAX_EXAMPLES:
        _refuse("", f"must be a list of 1 to {MAX_EXAMPLES} examples")
    for index, example in enumerate(examples):
        at = f"/{index}"
        if not isinstance(example, dict) or set(example) != {"request", "result"}:
            _refuse(at, "must be an object with exactly the members request and result")
        _check_one(f"{at}/request", example["request"], document, "request")
        _check_one(f"{at}/result", example["result"], document, "result")
    checked: list[dict[str, Any]] = examples
    return checked


def _check_one(at: str, value: Any, document: dict[str, Any], side: str) -> None:
    if not isinstance(value, dict) or not value:
        _refuse(at, "must be a non-empty JSON object")
    limit = document["requestMaxBytes" if side == "request" else "responseMaxBytes"]
    try:
        size = len(canonical_json(value))
    except (TypeError, ValueError):  # rfc8785's refusals (e.g. an integer beyond 2**53)
        _refuse(at, "is not canonical JSON")
    if size > limit:
        _refuse(at, f"is {size} bytes; the contract allows {limit}")
    schema = document["requestSchema" if side == "request" else "resultSchema"]
    try:
        compiled = schema_engine.compile_schema(schema_engine.schema_key(schema))
        errors = schema_engine.judge_here(compiled, value, _JUDGE_SECONDS)
    except (schema_engine.TooComplex, schema_engine.PatternRefused):
        _refuse(at, f"cannot be judged against the {side} schema")
    if errors:
        first = errors[0]
        _refuse(at + first["pointer"], f"does not match the {side} schema: {first['detail']}")


def _refuse(pointer: str, detail: str) -> NoReturn:
    raise InvalidExample(
        f"The example is not valid: /examples{pointer} {detail}.",
        errors=[{"pointer": f"/examples{pointer}", "detail": detail}],
    )
