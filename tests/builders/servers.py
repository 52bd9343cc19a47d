"""Servers started by tests stop in milliseconds (issue 23 item 5).

`socketserver`'s `serve_forever` notices `shutdown()` only when its selector wakes, every
`poll_interval` (half a second by default); uvicorn's main loop looks at `should_exit` every
tenth of a second. Here the stop is event-driven instead:

- `serve_in_thread(server)` / `stop_server(server, thread)`: the shutdown flag is set first and the
  selector is woken at once by one connection to the listening socket, so `serve_forever` returns
  right away; `shutdown()` then only waits for that.
- `PromptUvicorn`: a `uvicorn.Server` whose main loop waits on an asyncio event that `stop()`
  sets from any thread, whose start is signalled by a threading event, and whose shutdown skips
  uvicorn's fixed 0.1 s pauses (it checks every 2 ms for connections to finish, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any

import uvicorn

GRACEFUL_SECONDS = 2  # an in-flight request a test left behind cannot hold the stop longer


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that does not print a traceback when the peer hangs up first:
    the platform cutting a response off at its byte cap or timeout is what a test provokes.
    Its listen backlog holds a flood (socketserver's default of 5 drops the SYNs of a burst,
    and the kernel's retries then take seconds: the bulkhead tests send 110 calls at once)."""

    request_queue_size = 512

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve_in_thread(server: socketserver.BaseServer, name: str = "test-server") -> threading.Thread:
    """Serve `server` on a daemon thread (stop it with `stop_server`)."""
    thread = threading.Thread(target=server.serve_forever, args=(60.0,), name=name, daemon=True)
    thread.start()
    return thread


def stop_server(server: socketserver.BaseServer, thread: threading.Thread | None = None) -> None:
    """Stop a `serve_forever` loop at once and close the listening socket."""
    # `shutdown()` sets this same flag and then waits; setting it first, then waking the
    # selector, makes the loop return without waiting out its poll interval.
    server._BaseServer__shutdown_request = True  # type: ignore[attr-defined]
    address = getattr(server, "server_address", None)
    if isinstance(address, tuple):
        with contextlib.suppress(OSError):
            socket.create_connection(address[:2], timeout=1).close()
    if thread is None or thread.is_alive():
        server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=10)


class PromptUvicorn(uvicorn.Server):
    """A uvicorn server for a test thread: started and stopped by events, not polls."""

    def __init__(self, config: uvicorn.Config) -> None:
        config.timeout_graceful_shutdown = GRACEFUL_SECONDS
        super().__init__(config)
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await super().startup(sockets)
        self.ready.set()

    async def main_loop(self) -> None:
        assert self._stop is not None
        should_exit = await self.on_tick(0)
        while not should_exit and not self._stop.is_set():
            # A stop wakes this wait at once; otherwise `on_tick` refreshes the Date header.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=1.0)
            should_exit = await self.on_tick(0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown without its fixed 0.1 s pauses: close the listeners, ask each
        connection to finish, and check every few milliseconds until they have (bounded)."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACEFUL_SECONDS
        state = self.server_state
        while (state.connections or state.tasks) and loop.time() < deadline:
            await asyncio.sleep(0.002)
        for task in state.tasks:
            task.cancel(msg="the test server stopped")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    def stop(self) -> None:
        """Ask the server to shut down now (from any thread)."""
        self.should_exit = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)

    def run_forever(self) -> None:
        """The thread's target: serve until `stop()`, then wake anyone waiting for a start."""
        try:
            self.run()
        finally:
            self.ready.set()


def uvicorn_thread(app: Any, port: int, **config: Any) -> tuple[PromptUvicorn, threading.Thread]:
    """A `PromptUvicorn` for `app` on 127.0.0.1:`port` and the (unstarted) thread to run it."""
    server = PromptUvicorn(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config)
    )
    return server, threading.Thread(target=server.run_forever, name="uvicorn", daemon=True)
