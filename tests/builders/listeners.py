"""Raw TCP listeners on 127.0.0.1 that count accepted sockets and answer with scripted bytes,
and asyncio servers on a loop in a thread of their own (`asyncio_server`)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

Script = Callable[[socket.socket, "Listener"], None]


@dataclass
class Listener:
    port: int
    accepted: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self) -> int:
        with self.lock:
            return self.accepted


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP request head plus a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def respond(raw: bytes) -> Script:
    """A script that reads the request, writes `raw`, and closes."""

    def script(conn: socket.socket, _listener: Listener) -> None:
        read_request(conn)
        conn.sendall(raw)

    return script


def keep_alive(raw: bytes) -> Script:
    """A script that answers every request on the connection with `raw`, until the client
    closes it (a keep-alive server)."""

    def script(conn: socket.socket, _listener: Listener) -> None:
        while read_request(conn):
            conn.sendall(raw)

    return script


@contextmanager
def listener(script: Script) -> Iterator[Listener]:
    """Listen on a free port; every accepted socket is counted and handed to `script`."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    state = Listener(port=server.getsockname()[1])
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, suppress(OSError):
            script(conn, state)

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if stop.is_set():
                conn.close()
                return
            with state.lock:
                state.accepted += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        state.release.set()
        # Wake the accept loop with one last connection, then close.
        with suppress(OSError):
            socket.create_connection(("127.0.0.1", state.port), timeout=1).close()
        thread.join(timeout=5)
        server.close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_http(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request read whole: its head and a Content-Length body (raises
    `asyncio.IncompleteReadError` when the client closes first)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


@contextmanager
def asyncio_server(handle: Handler) -> Iterator[str]:
    """An asyncio server on a loopback port, on a loop in a thread of its own, each connection
    served by `handle`; yields its URL and stops it (and its thread) at the block's end."""
    ready = threading.Event()
    stop: list[Callable[[], object]] = []
    port: list[int] = []

    def serve() -> None:
        loop = asyncio.new_event_loop()

        async def main() -> None:
            listening = await asyncio.start_server(handle, "127.0.0.1", 0)
            port.append(listening.sockets[0].getsockname()[1])
            done = asyncio.Event()
            stop.append(lambda: loop.call_soon_threadsafe(done.set))
            ready.set()
            await done.wait()
            listening.close()

        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port[0]}"
    finally:
        stop[0]()
        thread.join(10)
