"""A proof of validity for the common JSON schemas, cheaper than `jsonschema` (decision 0435).

Every invoke checks its request body and its provider's result against the version's schemas.
`jsonschema`'s `iter_errors` walks an instance through generators, `descend` and `evolve` even
when it finds nothing (about 11 µs for a two-property request schema), and `is_valid` is the
same walk. `fast_valid(validator)` compiles the validator's schema, once, into plain checks
that answer only "valid for certain" (True) or "not known" (False): the caller runs
`iter_errors` whenever the answer is False, so every error reported is `jsonschema`'s own,
found the way it always was; only a valid instance skips the walk.

A schema gets a proof only when every keyword its draft validates is one of `type` (the seven
JSON types), `properties`, `required` (a list of names), `additionalProperties` (a boolean or
a schema of the same kind) and `format` (asserted by `jsonschema` only with a format checker,
which the engine's validators do not have), nested the same way; keywords the draft does not
know are ignored by both. Bounds are proven too, each only where the draft's keyword function
is draft 2020-12's (decision 0515): `minLength`/`maxLength`, `minimum`/`maximum`/
`exclusiveMinimum`/`exclusiveMaximum` (numbers), `minItems`/`maxItems`,
`minProperties`/`maxProperties` (integers), `items` (one schema, no `prefixItems`) and `enum`
of scalars. Any other (`$ref`, `pattern`, `uniqueItems`, …) means no proof.
A checked value proves its type only when it is exactly a JSON type (dict, list, str, int,
float, bool, None: what `orjson.loads` makes), and the type checks are the draft's own, taken
from its type checker and confirmed on sample values when the proof is built; a value of any
other class, anywhere it is checked, is "not known".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator

Check = Callable[[Any], bool]

# The draft's own implementations of the keywords proven (the same functions in every draft
# since 4), read from the public `VALIDATORS` mapping of a validator class.
_KEYWORDS = {
    name: Draft202012Validator.VALIDATORS[name]
    for name in ("type", "properties", "required", "additionalProperties", "format")
}
_JSON_CLASSES = (dict, list, str, int, float, bool, type(None))
_SAMPLES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -7,
    2**70,
    0.0,
    1.0,
    -2.0,
    1.5,
    math.inf,
    math.nan,
    "",
    "x",
    [],
    [1],
    {},
    {"a": 1},
)


def _is_integer_draft6(value: Any) -> bool:
    kind = type(value)
    return kind is int or (kind is float and value.is_integer())


_TYPES: dict[str, tuple[Check, Check]] = {
    # name: (draft 4's check, draft 6 and later's), on values of exactly a JSON class
    "object": (lambda v: type(v) is dict, lambda v: type(v) is dict),
    "array": (lambda v: type(v) is list, lambda v: type(v) is list),
    "string": (lambda v: type(v) is str, lambda v: type(v) is str),
    "boolean": (lambda v: type(v) is bool, lambda v: type(v) is bool),
    "null": (lambda v: v is None, lambda v: v is None),
    "number": (lambda v: type(v) in (int, float), lambda v: type(v) in (int, float)),
    "integer": (lambda v: type(v) is int, _is_integer_draft6),
}


_NUMBER = (int, float)


def _bound(applies: Callable[[Any], bool], broken: Callable[[Any, Any], bool], counts: bool) -> Any:
    """A check builder for a bound keyword: `broken(value, bound)` on values it applies to."""

    def build(bound: Any) -> Check:
        kind = type(bound)
        if kind is not int and (counts or kind is not float):
            raise _NoProof  # an odd bound (a bool, a string): `jsonschema` judges it

        def check(value: Any) -> bool:
            if type(value) not in _JSON_CLASSES:
                return False
            return not (applies(value) and broken(value, bound))

        return check

    return build


def _is_string(value: Any) -> bool:
    return type(value) is str


def _is_number(value: Any) -> bool:
    return type(value) in _NUMBER


def _is_array(value: Any) -> bool:
    return type(value) is list


def _is_object(value: Any) -> bool:
    return type(value) is dict


# keyword: its check builder, for the keywords proven where the draft's function is 2020-12's
_BOUNDS: dict[str, Any] = {
    "minLength": _bound(_is_string, lambda v, b: len(v) < b, True),
    "maxLength": _bound(_is_string, lambda v, b: len(v) > b, True),
    "minimum": _bound(_is_number, lambda v, b: v < b, False),
    "maximum": _bound(_is_number, lambda v, b: v > b, False),
    "exclusiveMinimum": _bound(_is_number, lambda v, b: v <= b, False),
    "exclusiveMaximum": _bound(_is_number, lambda v, b: v >= b, False),
    "minItems": _bound(_is_array, lambda v, b: len(v) < b, True),
    "maxItems": _bound(_is_array, lambda v, b: len(v) > b, True),
    "minProperties": _bound(_is_object, lambda v, b: len(v) < b, True),
    "maxProperties": _bound(_is_object, lambda v, b: len(v) > b, True),
}
_MORE = {name: Draft202012Validator.VALIDATORS[name] for name in (*_BOUNDS, "items", "enum")}
_SCALARS = (str, int, float, bool, type(None))


def _scalar_key(value: Any) -> tuple[int, Any]:
    # `jsonschema`'s equality on scalars: a boolean is not a number, 1 equals 1.0
    return (0 if type(value) is bool else 1 if type(value) in _NUMBER else 2, value)


def _enum_check(values: Any) -> Check:
    if type(values) is not list or any(type(v) not in _SCALARS for v in values):
        raise _NoProof
    keys = frozenset(_scalar_key(v) for v in values)

    def check(value: Any) -> bool:
        return type(value) in _SCALARS and _scalar_key(value) in keys

    return check


def _items_check(items: Any, known: Any, later: bool) -> Check:
    if type(items) is not dict:
        raise _NoProof  # `false`, a list (older drafts), or odd: `jsonschema` judges it
    sub = _compile(items, known, later)

    def check(value: Any) -> bool:
        kind = type(value)
        if kind is not list:
            return kind in _JSON_CLASSES
        return all(sub(item) for item in value)

    return check


class _NoProof(Exception):
    """The schema uses something `fast_valid` does not prove."""


def fast_valid(validator: Any) -> Check | None:
    """A check that is True only for instances `validator` finds no error in (see the module
    docstring), or None when the schema is not of the kind it proves."""
    cls = type(validator)
    try:
        checker = validator.TYPE_CHECKER
        later = bool(checker.is_type(1.0, "integer"))
        for name, variants in _TYPES.items():
            check = variants[1 if later else 0]
            for sample in _SAMPLES:
                if bool(checker.is_type(sample, name)) != check(sample):
                    return None
        known = cls.VALIDATORS
        for keyword, function in _KEYWORDS.items():
            if known.get(keyword) is not function:
                return None
        if validator.format_checker is not None:
            return None
        return _compile(validator.schema, known, later)
    except _NoProof:
        return None
    except Exception:  # an odd validator or schema: `jsonschema` alone judges it, as before
        return None


def _compile(schema: Any, known: Any, later: bool) -> Check:
    if schema is True:
        return _always
    if type(schema) is not dict:
        raise _NoProof  # False (never valid) or not a schema: leave it to jsonschema
    checks: list[Check] = []
    for keyword in schema:
        if keyword not in known or keyword in _KEYWORDS:
            continue
        if keyword not in _MORE or known[keyword] is not _MORE[keyword]:
            raise _NoProof
        value = schema[keyword]
        if keyword == "enum":
            checks.append(_enum_check(value))
        elif keyword == "items":
            checks.append(_items_check(value, known, later))
        else:
            checks.append(_BOUNDS[keyword](value))
    if "type" in schema:
        checks.append(_type_check(schema["type"], later))
    properties = schema.get("properties")
    required = schema.get("required")
    extra = schema.get("additionalProperties", True)
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        checks.append(_object_check(properties, required, extra, known, later))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks

        def both(value: Any) -> bool:
            return first(value) and second(value)

        return both
    every = tuple(checks)

    def all_of(value: Any) -> bool:
        return all(check(value) for check in every)

    return all_of


def _always(_value: Any) -> bool:
    return True


def _type_check(types: Any, later: bool) -> Check:
    names = [types] if type(types) is str else types
    if type(names) is not list or not names:
        raise _NoProof
    checks = []
    for name in names:
        if type(name) is not str or name not in _TYPES:
            raise _NoProof  # jsonschema raises UnknownType: it must be the one to do so
        checks.append(_TYPES[name][1 if later else 0])
    if len(checks) == 1:
        only = checks[0]

        def one(value: Any) -> bool:
            return type(value) in _JSON_CLASSES and only(value)

        return one

    def any_of(value: Any) -> bool:
        return type(value) in _JSON_CLASSES and any(check(value) for check in checks)

    return any_of


def _object_check(properties: Any, required: Any, extra: Any, known: Any, later: bool) -> Check:
    """`properties`, `required` and `additionalProperties`: each applies to an object only,
    and any other value passes them (as in `jsonschema`)."""
    if properties is None:
        properties = {}
    if type(properties) is not dict or any(type(name) is not str for name in properties):
        raise _NoProof
    if required is None:
        required = []
    if type(required) is not list or any(type(name) is not str for name in required):
        raise _NoProof
    subchecks = tuple((name, _compile(sub, known, later)) for name, sub in properties.items())
    subchecks = tuple((name, check) for name, check in subchecks if check is not _always)
    names = frozenset(properties)
    needed = tuple(required)
    if extra is True:
        others: Check | None = None
        closed = False
    elif extra is False:
        others, closed = None, True
    else:
        others, closed = _compile(extra, known, later), False
        if others is _always:
            others = None

    def check(value: Any) -> bool:
        kind = type(value)
        if kind is not dict:
            # Not an object: these keywords do not apply. Only a JSON value is vouched for.
            return kind in _JSON_CLASSES
        for name in needed:
            if name not in value:
                return False
        for name, sub in subchecks:
            if name in value and not sub(value[name]):
                return False
        if closed:
            for key in value:
                if key not in names:
                    return False
        elif others is not None:
            for key in value:
                if key not in names and not others(value[key]):
                    return False
        return True

    return check
