"""`set_through_slots`: the same instances as a frozen dataclass's own `__init__` (0477)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from mercato.core.frozen import set_through_slots
from mercato.invocations.flows import InvokeRequest, InvokeResult
from mercato.invocations.service import Replayed
from mercato.quotas.schemas import QuotaStatus


@dataclasses.dataclass(frozen=True, slots=True)
class Plain:
    a: str
    b: int | None
    c: bytes = b"c"
    d: tuple[int, ...] = ()


@set_through_slots
@dataclasses.dataclass(frozen=True, slots=True)
class Fast:
    a: str
    b: int | None
    c: bytes = b"c"
    d: tuple[int, ...] = ()


def _as_plain(fast: Fast) -> Plain:
    return Plain(*dataclasses.astuple(fast))


def test_the_init_takes_the_same_arguments_and_makes_the_same_instance() -> None:
    assert str(inspect.signature(Fast)) == str(inspect.signature(Plain))
    assert _as_plain(Fast("x", 1)) == Plain("x", 1)
    assert _as_plain(Fast(b=None, a="y", d=(1,))) == Plain(b=None, a="y", d=(1,))
    made = Fast("x", 2, b"z")
    assert made == Fast("x", 2, b"z") and hash(made) == hash(Fast("x", 2, b"z"))
    assert dataclasses.replace(made, b=3) == Fast("x", 3, b"z")
    assert pickle.loads(pickle.dumps(made)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = "w"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Fast("x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast("x", 1, e=2)  # type: ignore[call-arg]


def test_only_plain_frozen_slotted_dataclasses_are_taken() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    for cls in (NoSlots, Factory, Mutable):
        with pytest.raises(TypeError):
            set_through_slots(cls)


@pytest.mark.parametrize("cls", [InvokeRequest, InvokeResult, Replayed, QuotaStatus])
def test_the_hot_path_s_classes_use_it(cls: type) -> None:
    assert "_set_0" in vars(cls)["__init__"].__code__.co_names
