"""`validation.fast_valid` (decision 0435): it vouches only for instances `jsonschema` finds no
error in, so `schema_engine.schema_errors` reports exactly what `iter_errors` reports."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import FormatChecker, TypeChecker, validators

from mercato.core import schema_engine
from mercato.core.schema_proof import fast_valid

_DRAFTS = [
    None,
    "http://json-schema.org/draft-03/schema#",
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
]
_TYPES = ["object", "array", "string", "boolean", "null", "number", "integer"]
_NAMES = st.sampled_from(["a", "b", "job", "n", "x"])

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, 1.0, -2.0, 3.0])
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=4),
    max_leaves=12,
)


class _Dict(dict[str, Any]):
    pass


# Values of other classes than orjson's, where a caller could hand them in.
_odd = st.sampled_from([(1, 2), _Dict(a=1), b"x", 1 + 0j, {1, 2}])
_instances = _json | _odd | st.dictionaries(_NAMES, _json | _odd, max_size=4)


def _schemas(depth: int) -> st.SearchStrategy[Any]:
    sub = st.just(True) if depth == 0 else _schemas(depth - 1)
    keywords: dict[str, st.SearchStrategy[Any]] = {
        "type": st.sampled_from(_TYPES) | st.lists(st.sampled_from(_TYPES), max_size=3),
        "properties": st.dictionaries(_NAMES, sub, max_size=3),
        "required": st.lists(_NAMES, max_size=3),
        "additionalProperties": st.booleans() | sub,
        "format": st.sampled_from(["email", "date-time"]),
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(0, 3),
        "minimum": st.integers(-5, 5) | st.sampled_from([0.5, -2.0]),
        "maximum": st.integers(-5, 5) | st.sampled_from([0.5, 2**70]),
        "exclusiveMinimum": st.integers(-5, 5),
        "exclusiveMaximum": st.sampled_from([0, 1.5, 3]),
        "minItems": st.integers(0, 3),
        "maxItems": st.integers(0, 3),
        "minProperties": st.integers(0, 3),
        "maxProperties": st.integers(0, 3),
        "items": sub,
        "enum": st.lists(
            st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([1.0, 0.0, "a", ""]),
            max_size=3,
        ),
        "title": st.text(max_size=3),
        "x-note": st.integers(),
    }
    # Keywords it does not prove, and odd values of the ones it does: never vouched for.
    rare: dict[str, st.SearchStrategy[Any]] = {
        "enum": st.lists(_json, max_size=3),
        "minimum": st.booleans() | st.just("5"),
        "minLength": st.just(1.5),
        "items": st.just(False) | st.lists(sub, max_size=2),
        "prefixItems": st.lists(sub, max_size=2),
        "uniqueItems": st.booleans(),
        "const": _json,
        "pattern": st.just("^a"),
        "$ref": st.just("#"),
        "type": st.sampled_from(["any", "float"]) | st.integers(),
        "required": st.booleans() | st.just("ab"),
        "additionalProperties": st.integers(0, 1) | st.none(),
    }

    def build(picked: dict[str, Any], odd: dict[str, Any], draft: str | None) -> Any:
        schema = {**picked, **odd}
        if draft is not None:
            schema["$schema"] = draft
        return schema

    common = st.fixed_dictionaries({}, optional=keywords)
    odd = st.fixed_dictionaries({}, optional=rare).filter(lambda d: len(d) <= 1)
    plain = st.builds(build, common, st.just({}), st.sampled_from(_DRAFTS))
    return st.one_of(plain, plain, st.builds(build, common, odd, st.sampled_from(_DRAFTS)))


def _reference(schema: Any, instance: Any) -> list[dict[str, str]]:
    """`schema_engine.schema_errors` as it was before the proof: `iter_errors`, always."""
    key = orjson.loads(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    validator = validators.validator_for(key)(key)
    found = []
    for error in validator.iter_errors(instance):
        found.append(
            {"pointer": schema_engine._pointer(error.absolute_path), "detail": error.message[:300]}
        )
        if len(found) >= 20:
            break
    return sorted(found, key=lambda e: e["pointer"])


def _outcome(check: Any, *args: Any) -> Any:
    try:
        return check(*args)
    except Exception as error:  # jsonschema's own refusals (an unknown type, …)
        return type(error)


@settings(max_examples=600, deadline=None)
@given(schema=_schemas(2), instance=_instances)
def test_errors_are_jsonschemas(schema: Any, instance: Any) -> None:
    assert _outcome(schema_engine.schema_errors, schema, instance) == _outcome(
        _reference, schema, instance
    )


@settings(max_examples=600, deadline=None)
@given(schema=_schemas(2), instance=_instances)
def test_vouches_only_for_valid_instances(schema: Any, instance: Any) -> None:
    validator = validators.validator_for(schema)(schema)
    proof = fast_valid(validator)
    if proof is not None and proof(instance):
        assert not list(validator.iter_errors(instance))


def test_the_common_schemas_have_a_proof() -> None:
    request = {
        "type": "object",
        "required": ["job"],
        "properties": {"job": {"type": "string"}, "n": {"type": "integer"}},
        "additionalProperties": False,
    }
    proof = fast_valid(validators.validator_for(request)(request))
    assert proof is not None
    assert proof({"job": "x", "n": 3})
    assert not proof({"job": "x", "n": 3.5})  # not known: jsonschema reports it
    assert not proof({"n": 3})
    assert not proof({"job": "x", "other": 1})


def test_bounds_items_and_scalar_enums_have_a_proof() -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 3},
            "n": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
            "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["a", 1, None]}},
        },
        "minProperties": 1,
    }
    proof = fast_valid(validators.validator_for(schema)(schema))
    assert proof is not None
    assert proof({"text": "abc", "n": 9.5, "tags": ["a", 1.0]})
    for wrong in (
        {},
        {"text": ""},
        {"text": "abcd"},
        {"n": 10},
        {"n": -1},
        {"tags": ["a", "a", "a"]},
        {"tags": [True]},  # a boolean is not 1
        {"tags": [[]]},
    ):
        assert not proof(wrong), wrong
        assert _reference(schema, wrong) != []


def test_draft4_integers_are_draft4s() -> None:
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    validator = validators.validator_for(schema)(schema)
    proof = fast_valid(validator)
    assert proof is not None
    assert not proof(1.0)
    assert schema_engine.schema_errors(schema, 1.0) == _reference(schema, 1.0) != []
    later = {"type": "integer"}
    assert fast_valid(validators.validator_for(later)(later))(1.0)  # type: ignore[misc]


def test_no_proof_for_what_it_does_not_know() -> None:
    for schema in (
        {"enum": [[1]]},
        {"items": False},
        {"minimum": True},
        {"$ref": "#"},
        {"type": "any"},
        {"properties": {"a": False}},
        False,
        {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"},
    ):
        validator = validators.validator_for(schema)(schema)
        assert fast_valid(validator) is None, schema
    with_formats = jsonschema.Draft202012Validator({}, format_checker=FormatChecker())
    assert fast_valid(with_formats) is None
    # A validator whose type checker knows no types: no proof (and no error of its own).
    bare = validators.extend(jsonschema.Draft202012Validator, type_checker=TypeChecker())
    assert fast_valid(bare({"type": "object"})) is None
