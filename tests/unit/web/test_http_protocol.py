"""`mercato serve`'s HTTP protocol: httptools with a bounded request head (decision 0380).

The protocol is driven directly, read by read, with a transport that records what is written,
so each way a head can be too large (complete in one read, or never ending) is its own case.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from mercato.web.http import MAX_HEAD_BYTES, BoundedHttpToolsProtocol


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _connect() -> tuple[BoundedHttpToolsProtocol, _Transport]:
    config = Config(app=_app, http=BoundedHttpToolsProtocol, log_config=None, lifespan="off")
    config.load()
    protocol = BoundedHttpToolsProtocol(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = _Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def _served(protocol: BoundedHttpToolsProtocol, transport: _Transport) -> bytes:
    for task in list(protocol.tasks):
        await task
    return transport.written


def _status(written: bytes) -> bytes:
    return written.split(b"\r\n", 1)[0]


def test_a_normal_request_is_served() -> None:
    async def scenario() -> bytes:
        protocol, transport = await _connect()
        protocol.data_received(b"GET /x HTTP/1.1\r\nHost: a\r\n")
        protocol.data_received(b"X-Fill: " + b"a" * (MAX_HEAD_BYTES - 100) + b"\r\n\r\n")
        return await _served(protocol, transport)

    assert _status(asyncio.run(scenario())) == b"HTTP/1.1 200 OK"


@pytest.mark.parametrize("reads", [1, 2, 64])
def test_a_head_over_the_limit_is_answered_431_and_closed(reads: int) -> None:
    head = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (4 * MAX_HEAD_BYTES) + b"\r\n\r\n"
    size = -(-len(head) // reads)

    async def scenario() -> tuple[bytes, bool, int]:
        protocol, transport = await _connect()
        for start in range(0, len(head), size):
            if transport.closed:
                break
            protocol.data_received(head[start : start + size])
        return transport.written, transport.closed, len(protocol.tasks)

    written, closed, tasks = asyncio.run(scenario())
    assert _status(written) == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert closed and tasks == 0  # the application never saw the request


def test_a_head_that_never_ends_is_refused_once_it_passes_the_limit() -> None:
    async def scenario() -> tuple[bytes, int]:
        protocol, transport = await _connect()
        protocol.data_received(b"GET /x HTTP/1.1\r\nHost: a\r\nX-Slow: ")
        sent = 0
        while not transport.closed and sent < 10 * MAX_HEAD_BYTES:
            protocol.data_received(b"a" * 4096)  # no end of line, ever
            sent += 4096
        return transport.written, sent

    written, sent = asyncio.run(scenario())
    assert _status(written) == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert sent <= MAX_HEAD_BYTES + 4096


def test_keep_alive_requests_each_get_their_own_budget() -> None:
    request = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Fill: " + b"a" * (MAX_HEAD_BYTES // 2) + b"\r\n\r\n"

    async def scenario() -> bytes:
        protocol, transport = await _connect()
        for _ in range(4):
            for start in range(0, len(request), 1000):
                protocol.data_received(request[start : start + 1000])
            await _served(protocol, transport)
        return transport.written

    written = asyncio.run(scenario())
    assert written.count(b"HTTP/1.1 200 OK") == 4 and b"431" not in written
