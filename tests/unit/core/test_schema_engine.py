"""The validation engine (issue 39 item 1, decision 0515): patterns are RE2, `uniqueItems` is
linear and means what `jsonschema` means, every judgement has a CPU deadline, and Python's own
engine (kept for versions published before the RE2 rule) runs where it can be stopped."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from builders.hard_schemas import HARD_SCHEMAS, JUDGED, TOO_COMPLEX, hard_instance
from mercato.core import schema_engine
from mercato.core.schema_engine import TooComplex, judge, pattern_problems, schema_errors


def _judged(schema: Any, instance: Any, deadline_ms: int = 200) -> list[dict[str, str]] | str:
    try:
        return asyncio.run(judge(schema, instance, deadline_ms=deadline_ms))
    except TooComplex:
        return "too complex"


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    # Python's `re` needs about 2**40 steps for this one; RE2 reads the string once.
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    errors = schema_errors(schema, {"s": "a" * 40 + "!"})
    assert [e["pointer"] for e in errors] == ["/s"]
    assert "does not match" in errors[0]["detail"]
    assert schema_errors(schema, {"s": "a" * 40}) == []


def test_pattern_properties_and_additional_properties_match_with_re2() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^(a|aa)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert schema_errors(schema, {"aaaa": 1}) == []
    wrong = schema_errors(schema, {"aaaa": "x", "a" * 40 + "!": 1})
    assert [e["pointer"] for e in wrong] == ["", "/aaaa"]
    assert (
        "do not match any of the regexes" in wrong[0]["detail"] or "does not" in wrong[0]["detail"]
    )


def test_digits_are_ascii_as_in_ecma_262() -> None:
    # ECMA-262's \\d is [0-9]; Python's `re` would take the Arabic-Indic digits too.
    schema = {"type": "string", "pattern": "^\\d+$"}
    assert schema_errors(schema, "0123") == []
    assert schema_errors(schema, "\u0663\u0664") != []


def test_pattern_problems_name_every_refused_pattern_by_pointer() -> None:
    schema = {
        "properties": {"a": {"pattern": "(x)\\1"}, "ok": {"pattern": "^[a-z]+$"}},
        "items": {"patternProperties": {"(?=y)": {}, "^z$": {}}},
        "$defs": {"d": {"anyOf": [{"pattern": "(?<!q)r"}]}},
        "enum": [{"pattern": "(x)\\1"}],  # a value, not a schema: not a pattern
        "const": {"pattern": "(x)\\1"},
    }
    found = pattern_problems(schema, ("requestSchema",))
    assert [e["pointer"] for e in found] == [
        "/requestSchema/$defs/d/anyOf/0/pattern",
        "/requestSchema/items/patternProperties/(?=y)",
        "/requestSchema/properties/a/pattern",
    ]
    assert all(e["detail"].startswith("not an RE2 pattern") for e in found)
    assert pattern_problems({"pattern": "a{1000}{1000}"}) != []  # too big a program
    assert pattern_problems({"pattern": "^[a-z]{1,64}$"}) == []


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | st.text("ab", max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_json, max_size=6))
def test_unique_items_means_what_jsonschema_means(items: list[Any]) -> None:
    schema = {"type": "array", "uniqueItems": True}
    expected = Draft202012Validator(schema).is_valid(items)
    assert (schema_errors(schema, items) == []) is expected


def test_unique_items_cases() -> None:
    schema = {"uniqueItems": True}
    assert schema_errors(schema, [1, 1.0]) != []
    assert schema_errors(schema, [1, True]) == []
    assert schema_errors(schema, [0, False, None, [], {}]) == []
    assert schema_errors(schema, [{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}]) != []
    assert schema_errors(schema, [[1], [True]]) == []


@pytest.mark.parametrize("name", JUDGED)
def test_the_hard_schemas_that_can_be_judged_are_judged(name: str) -> None:
    errors = _judged(HARD_SCHEMAS[name](), hard_instance())
    assert isinstance(errors, list) and errors, errors  # each finds its violation in time


@pytest.mark.parametrize("name", TOO_COMPLEX)
def test_the_hard_schemas_that_cannot_be_judged_stop_at_the_deadline(name: str) -> None:
    assert _judged(HARD_SCHEMAS[name](), hard_instance()) == "too complex"


def test_a_fan_out_that_an_instance_satisfies_at_once_is_judged() -> None:
    assert _judged(HARD_SCHEMAS["any-of"](), {"n": "text"}) == []  # the first path is valid


def test_pythons_engine_judges_a_pattern_re2_refuses_and_is_stopped_when_it_overruns() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "pattern": "^(?=x)x\\d$"},
            "t": {"type": "string", "pattern": "^(a+)+(?!b)$"},
        },
    }
    assert schema_engine.compile_schema(schema_engine.schema_key(schema)).in_child
    assert _judged(schema, {"s": "x1"}) == []
    assert [e["pointer"] for e in _judged(schema, {"s": "y1"})] == ["/s"]  # type: ignore[index]
    assert _judged(schema, {"t": "a" * 40 + "!"}) == "too complex"  # its process is ended
    assert _judged(schema, {"s": "x\u0663"}) == []  # Python's \\d, as it was accepted with
    assert _judged(schema, {"t": "aaa"}) == []  # and another one judges the next


def test_unevaluated_properties_beside_pattern_properties_run_where_they_can_be_stopped() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^(a|aa)+$": {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    assert schema_engine.compile_schema(schema_engine.schema_key(schema)).in_child
    assert _judged(schema, {"aaaa": 1}) == []
    assert _judged(schema, {"b": 1}) != []
    assert _judged(schema, {"a" * 40 + "!": 1}) == "too complex"
