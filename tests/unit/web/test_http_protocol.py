"""`mercato serve`'s HTTP protocol: httptools with a bounded request head (decision 0380), each
answer in one write (decision 0466).

The protocol is driven directly, read by read, with a transport that records what is written,
write by write, so each way a head can be too large (complete in one read, or never ending) and
each way an answer can end is its own case.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from mercato.web.http import MAX_HEAD_BYTES, BoundedHttpToolsProtocol

App = Any


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.written_before_close: bytes | None = None

    @property
    def written(self) -> bytes:
        return b"".join(self.writes)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        if not self.closed:
            self.written_before_close = self.written
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


async def _connect(app: App = _app) -> tuple[BoundedHttpToolsProtocol, _Transport]:
    config = Config(app=app, http=BoundedHttpToolsProtocol, log_config=None, lifespan="off")
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


# --- each answer in one write (decision 0466) ---------------------------------------------


def _run(app: App, *requests: bytes) -> _Transport:
    async def scenario() -> _Transport:
        protocol, transport = await _connect(app)
        for request in requests:
            protocol.data_received(request)
            await _served(protocol, transport)
        return transport

    return asyncio.run(scenario())


def _answer(body: bytes, *, more: tuple[bytes, ...] = ()) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [] if more else [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": bool(more)})
        for i, part in enumerate(more):
            await send({"type": "http.response.body", "body": part, "more_body": i < len(more) - 1})

    return app


GET = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"


def test_an_answer_is_one_write_of_its_head_and_body() -> None:
    transport = _run(_answer(b'{"ok":true}'), GET)
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: 11" in head
    assert body == b'{"ok":true}'


def test_keep_alive_answers_are_one_write_each_in_order() -> None:
    transport = _run(_answer(b"first"), GET, GET)
    assert [w.rpartition(b"\r\n\r\n")[2] for w in transport.writes] == [b"first", b"first"]


def test_a_streamed_answer_sends_its_head_with_the_first_part_then_each_part() -> None:
    transport = _run(_answer(b"one", more=(b"two", b"three")), GET)
    assert len(transport.writes) == 3
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK")
    assert transport.writes[0].endswith(b"\r\n\r\n3\r\none\r\n")
    assert transport.writes[1:] == [b"3\r\ntwo\r\n", b"5\r\nthree\r\n0\r\n\r\n"]


def test_a_large_body_follows_its_head_in_a_write_of_its_own() -> None:
    body = b"x" * (1024 * 1024)
    transport = _run(_answer(body), GET)
    assert len(transport.writes) == 2
    assert transport.writes[0].endswith(b"\r\n\r\n") and transport.writes[1] == body


def test_an_answer_to_head_writes_its_head_when_it_ends() -> None:
    transport = _run(_answer(b"not sent"), b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n")
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK")
    assert transport.writes[0].endswith(b"\r\n\r\n") and not transport.closed


def test_a_connection_closed_after_the_head_gets_the_head_first() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("failed mid-answer")

    transport = _run(app, GET)
    assert transport.closed
    assert transport.written_before_close is not None
    assert transport.written_before_close.startswith(b"HTTP/1.1 200 OK")
    assert transport.written_before_close.endswith(b"\r\n\r\n")


def test_100_continue_is_written_before_the_answer() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        await _answer(message["body"])(scope, receive, send)

    request = b"POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"

    async def scenario() -> _Transport:
        protocol, transport = await _connect(app)
        protocol.data_received(request)
        for _ in range(100):  # loop turns until the app asks for the body
            if transport.writes:
                break
            await asyncio.sleep(0)
        protocol.data_received(b"ping")
        await _served(protocol, transport)
        return transport

    transport = asyncio.run(scenario())
    assert transport.writes[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert len(transport.writes) == 2 and transport.writes[1].endswith(b"\r\n\r\nping")


def test_a_header_value_with_cr_lf_from_the_app_never_reaches_the_wire() -> None:
    """A value with CR/LF is refused by uvicorn's cycle: the app's send raises, nothing of the
    answer is written, the connection is closed."""
    raised: list[BaseException] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"2"), (b"x-request-id", b"a\r\nSet-Cookie: s=1")]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        except RuntimeError as exc:
            raised.append(exc)
            raise
        await send({"type": "http.response.body", "body": b"ok"})

    transport = _run(app, GET)
    assert [str(e) for e in raised] == ["Invalid HTTP header value."]
    assert b"Set-Cookie" not in transport.written
    assert transport.closed
