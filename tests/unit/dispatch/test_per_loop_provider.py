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
