"""`PerLoopProvider`: one async provider client per running loop, made on it, closed with it."""

from __future__ import annotations

import asyncio

from builders.event_loops import run_on_fresh_loop
from mercato.dispatch.port import PerLoopProvider


def test_a_client_made_on_a_loop_closes_with_it() -> None:
    """Without lifespan (a sync caller's own loops), each loop gets a client of its own, and
    the loop's shutdown closes it: none is left open behind a finished loop."""
    closed: list[int] = []

    class Counting:
        def __init__(self, number: int) -> None:
            self.number = number

        async def execute(self, *_: object, **__: object) -> object:
            raise AssertionError("not called")

        async def reconcile(self, *_: object, **__: object) -> object:
            raise AssertionError("not called")

        async def aclose(self) -> None:
            closed.append(self.number)

    provider = PerLoopProvider(lambda: Counting(provider.made))  # type: ignore[arg-type,return-value]

    async def use() -> asyncio.AbstractEventLoop:
        await provider.open()
        await provider.open()  # the same loop: the same client
        return asyncio.get_running_loop()

    first, second = run_on_fresh_loop(use()), run_on_fresh_loop(use())
    assert provider.made == 2 and closed == [0, 1]
    assert not provider.open_on(first) and not provider.open_on(second)


def test_execute_forwards_to_the_loops_client_first_and_later() -> None:
    """The first call makes the loop's client; every later one is that client's own call
    (decision 0482): both forward the same arguments and answer what the client answered."""
    calls: list[tuple[object, dict[str, object]]] = []

    class Recording:
        async def execute(self, target: object, **kwargs: object) -> object:
            calls.append((target, kwargs))
            return ("answer", len(calls))

        async def reconcile(self, *_: object, **__: object) -> object:
            raise AssertionError("not called")

        async def aclose(self) -> None:
            return None

    provider = PerLoopProvider(Recording)  # type: ignore[arg-type]
    given = {
        "idempotency_key": "k",
        "payload_bytes": b"{}",
        "response_max_bytes": 10,
        "timeout": 1.5,
    }

    async def use() -> list[object]:
        answers = [await provider.execute("t", **given) for _ in range(3)]  # type: ignore[arg-type]
        await provider.aclose()
        return answers

    assert run_on_fresh_loop(use()) == [("answer", 1), ("answer", 2), ("answer", 3)]
    assert calls == [("t", given)] * 3 and provider.made == 1
