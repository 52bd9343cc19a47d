"""An `__init__` for frozen slotted dataclasses that sets fields through their slots.

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self, name,
value)` (its own `__setattr__` refuses): in CPython 3.11 that looks the attribute up by name
again for every field, about 1,400 instructions each. The slot's own descriptor setter does the
same store for about half (decision 0477). `set_through_slots` gives a class an `__init__` with
the same parameters, defaults and effect, written that way; the class is otherwise unchanged
(still frozen: assignment after `__init__` raises as before).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def set_through_slots(cls: type[T]) -> type[T]:
    """Replace the `__init__` of `cls`, a `@dataclass(frozen=True, slots=True)` whose fields
    are all plain `__init__` parameters (no factory, no keyword-only, no `__post_init__`)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    scope: dict[str, Any] = {}
    names: list[str] = []
    lines: list[str] = []
    for index, field in enumerate(fields):
        if (
            not field.init
            or field.kw_only
            or field.default_factory is not dataclasses.MISSING
            or not field.name.isidentifier()
            or field.name.startswith("_")
        ):
            raise TypeError(f"{cls.__name__}.{field.name} is not a plain field")
        scope[f"_set_{index}"] = getattr(cls, field.name).__set__
        if field.default is dataclasses.MISSING:
            names.append(field.name)
        else:
            scope[f"_default_{index}"] = field.default
            names.append(f"{field.name}=_default_{index}")
        lines.append(f"    _set_{index}(self, {field.name})")
    source = f"def __init__(self, {', '.join(names)}):\n" + "\n".join(lines or ["    pass"])
    made: dict[str, Any] = {}
    exec(source, scope, made)  # noqa: S102 - made from the class's own field names
    init = made["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {field.name: field.type for field in fields} | {"return": None}
    setattr(cls, "__init__", init)  # noqa: B010 - replacing the method, as dataclass sets it
    return cls
