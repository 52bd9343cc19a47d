"""The bulkhead's counts (decision 0510): bounded per connection (its own bound, else the
default) and in all; a refusal takes nothing; a slot given back is free again."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from mercato.core.bulkhead import Bulkhead
from mercato.settings import Settings


def test_a_connection_is_bounded_by_its_own_limit_or_the_default() -> None:
    slots = Bulkhead(per_connection=2, process=100)

    assert [slots.take("a", None) for _ in range(3)] == [True, True, False]
    assert [slots.take("b", 3) for _ in range(4)] == [True, True, True, False]
    assert (slots.in_flight("a"), slots.in_flight("b"), slots.in_flight()) == (2, 3, 5)
    slots.give_back("a")
    assert slots.take("a", None) and not slots.take("a", None)


def test_the_process_bound_covers_every_connection() -> None:
    slots = Bulkhead(per_connection=10, process=3)

    assert [slots.take(c, None) for c in ("a", "b", "c", "d")] == [True, True, True, False]
    assert slots.in_flight("d") == 0 and slots.in_flight() == 3
    slots.give_back("b")
    assert slots.take("d", None)


def test_giving_back_a_slot_never_taken_is_an_error() -> None:
    slots = Bulkhead(per_connection=1, process=1)
    with pytest.raises(RuntimeError):
        slots.give_back("a")
    assert slots.in_flight() == 0


def test_threads_taking_at_once_never_pass_the_bound() -> None:
    slots = Bulkhead(per_connection=5, process=1000)
    barrier = threading.Barrier(20)
    taken: list[bool] = []
    lock = threading.Lock()

    def take() -> None:
        barrier.wait()
        got = slots.take("a", None)
        with lock:
            taken.append(got)

    threads = [threading.Thread(target=take) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert taken.count(True) == 5 and slots.in_flight("a") == 5


def test_a_default_over_the_ceiling_is_a_configuration_error() -> None:
    with pytest.raises(ValidationError, match="MERCATO_PROVIDER_MAX_IN_FLIGHT"):
        Settings(env="dev", provider_max_in_flight=2000)
    settings = Settings(env="dev")
    assert (
        settings.provider_max_in_flight,
        settings.provider_max_in_flight_ceiling,
        settings.max_in_flight,
    ) == (64, 1024, 4096)
