"""Ids: the format (`format_id`) and the system's source (`SystemIds`)."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest

from mercato.core.ids import SystemIds, _tails, format_id

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _digits(number: int, width: int) -> str:
    """The definition: the low `width` base-36 digits of `number`, most significant first."""
    out = []
    for _ in range(width):
        number, rem = divmod(number, 36)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def _reference(prefix: str, millis: int, bits: int) -> str:
    return f"{prefix}_{_digits(millis, 9)}{_digits(bits, 16)}"


@pytest.mark.parametrize("millis", [0, 1, 35, 36, 1_790_000_000_000, 36**9 - 1, 36**9, 2**80])
@pytest.mark.parametrize("bits", [0, 1, 1295, 1296, 36**8 - 1, 36**8, 2**80 - 1, 36**16, 2**90])
def test_format_id_keeps_its_definition_at_the_edges(millis: int, bits: int) -> None:
    assert format_id("inv", millis, bits) == _reference("inv", millis, bits)


def test_format_id_keeps_its_definition_for_any_value() -> None:
    rng = random.Random(20)
    for _ in range(20_000):
        millis = rng.getrandbits(rng.choice([1, 20, 41, 47, 60]))
        bits = rng.getrandbits(rng.choice([1, 8, 40, 79, 80, 84]))
        assert format_id("x", millis, bits) == _reference("x", millis, bits)


def test_system_ids_are_now_and_80_random_bits() -> None:
    source = SystemIds()
    before = time.time_ns() // 1_000_000
    made = [source.new("inv") for _ in range(5_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(made)) == len(made)
    for made_id in made:
        prefix, _, digits = made_id.partition("_")
        assert prefix == "inv"
        assert len(digits) == 25
        assert set(digits) <= set(_ALPHABET)
        assert before <= int(digits[:9], 36) <= after
        assert int(digits[9:], 36) < 2**80
    assert made == sorted(made, key=lambda value: value[4:13])  # time-ordered
    tails = {value[13:] for value in made}
    assert len(tails) == len(made)  # no random part handed out twice


def test_threads_drawing_at_once_never_share_random_bits() -> None:
    source = SystemIds()
    made: list[list[str]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def draw(into: list[str]) -> None:
        start.wait()
        into.extend(source.new("x") for _ in range(2_000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tails = [value[11:] for into in made for value in into]
    assert len(set(tails)) == len(tails) == 8_000


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="fork")
def test_a_forked_child_never_reuses_the_parents_random_bits() -> None:
    source = SystemIds()
    source.new("x")  # the parent has random bytes in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, " ".join(source.new("x")[11:] for _ in range(20)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {source.new("x")[11:] for _ in range(20)}
    assert len(child) == 20
    assert not child & parent


def test_a_batch_of_random_digits_keeps_the_definition() -> None:
    # `_tails` formats a pool's ids together; each is the 80 bits' 16 base-36 digits, in order.
    rng = random.Random(48)
    for pool in [bytes(640), b"\xff" * 640, *(rng.randbytes(640) for _ in range(200))]:
        expected = [
            _digits(int.from_bytes(pool[at : at + 10]), 16) for at in range(0, len(pool), 10)
        ]
        assert _tails(pool) == expected
