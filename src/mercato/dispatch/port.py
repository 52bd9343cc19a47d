"""What the invocation engine needs of a provider client on the event loop.

`AsyncProvider` is the port the flows call (`runtime.async_provider_client()`, or the running
loop's own client: `clients`): the two calls of the provider contract, awaited, returning the
same `RawAnswer` as the sync client.
`mercato.dispatch.async_client.AsyncProviderClient` implements it; a test double can too.

`PerLoopProvider` holds one real client per running event loop. An aiohttp session belongs to
the loop it was opened on, so a client is made on the first call inside a loop and reused by
every later call there: a serve process runs one loop, so it makes one client, at its first
call, and closes it at shutdown (`aclose`, on that loop). A process that runs several loops
one after another (a test's client without lifespan, a sync caller's `asyncio.run`) gets one
client per loop and closes each on its loop. `clients` shows the open ones by loop, so that the
flow calls its loop's client with nothing of this class in between.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Protocol

from mercato.dispatch.calls import RawAnswer
from mercato.providers.schemas import DispatchTarget

__all__ = ["AsyncProvider", "ClosableAsyncProvider", "PerLoopProvider"]


class AsyncProvider(Protocol):
    """The provider calls of the invocation engine, awaited (see the module docstring)."""

    async def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        """POST /v1/executions with the stored payload bytes."""
        ...

    async def reconcile(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        """POST /v1/reconciliations for a key sent earlier."""
        ...


class ClosableAsyncProvider(AsyncProvider, Protocol):
    async def aclose(self) -> None: ...


class PerLoopProvider:
    """An `AsyncProvider` that makes one client with `make()` per running loop, on that loop,
    and closes it when the loop shuts down (or earlier, with `aclose` on that loop)."""

    def __init__(self, make: Callable[[], ClosableAsyncProvider]) -> None:
        self._make = make
        self.clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, ClosableAsyncProvider
        ] = weakref.WeakKeyDictionary()
        """The open client of each loop that has one (read it; only this class changes it)."""
        self._keepers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, AsyncGenerator[None]
        ] = weakref.WeakKeyDictionary()
        self.made = 0
        """How many clients were made (one per loop that made a call)."""

    async def open(self) -> None:
        """Make the running loop's client now (a server's start-up), not at its first call."""
        await self._client()

    async def _client(self) -> ClosableAsyncProvider:
        loop = asyncio.get_running_loop()
        held = self.clients.get(loop)
        if held is not None:
            return held
        client = self._make()
        # The loop closes what it made: an async generator first iterated on a loop is closed
        # by that loop's shutdown (`shutdown_asyncgens`, run by asyncio.run and anyio.run), so
        # a loop that ends without calling `aclose` (a test client without lifespan) does not
        # leave its sessions open.
        keeper = self._closes_with_loop(loop, client)
        await keeper.__anext__()
        self.clients[loop] = client
        self._keepers[loop] = keeper
        self.made += 1
        return client

    async def execute(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        payload_bytes: bytes,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        client = await self._client()
        return await client.execute(
            target,
            idempotency_key=idempotency_key,
            payload_bytes=payload_bytes,
            response_max_bytes=response_max_bytes,
            timeout=timeout,
        )

    async def reconcile(
        self,
        target: DispatchTarget,
        *,
        idempotency_key: str,
        response_max_bytes: int,
        timeout: float,
    ) -> RawAnswer:
        client = await self._client()
        return await client.reconcile(
            target,
            idempotency_key=idempotency_key,
            response_max_bytes=response_max_bytes,
            timeout=timeout,
        )

    def open_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether `loop` has a client open now."""
        return loop in self.clients

    async def aclose(self) -> None:
        """Close the running loop's client (the others belong to their own loops)."""
        keeper = self._keepers.get(asyncio.get_running_loop())
        if keeper is not None:
            await keeper.aclose()  # its `finally` forgets and closes the client

    async def _closes_with_loop(
        self, loop: asyncio.AbstractEventLoop, client: ClosableAsyncProvider
    ) -> AsyncGenerator[None]:
        try:
            yield
        finally:
            self.clients.pop(loop, None)
            self._keepers.pop(loop, None)
            await client.aclose()
