"""The HTTP/1.1 protocol `mercato serve` runs: uvicorn's httptools protocol with a bounded head.

httptools (llhttp, in C) parses a request for a fraction of the CPU of h11 (pure Python), but
has no limit on the size of a request head: a client could make the server buffer headers for
ever. This protocol keeps the limit that h11's `h11_max_incomplete_event_size` gave (decision
0182), counted two ways:

- a head that completes (request line and headers) is measured exactly when it completes;
- a head still incomplete is measured by the bytes that arrived while it was being read, so
  one that never ends is refused after at most `MAX_HEAD_BYTES` and one read's worth of data.

Either way the answer is `431 Request Header Fields Too Large` and the connection is closed;
the application never sees the request. See docs/decisions/0380-httptools-bounded-head.md.

It also writes each answer in one `write()`: uvicorn writes a response's head when the
response starts and its body when it comes, two system calls and two TCP segments a request,
each waking the client; the head is held until the first body write and sent with it
(`OneWriteAnswer`, decision 0466).

The protocol overrides only uvicorn's parser callbacks and `data_received`, each calling
uvicorn's own; the answer is written by uvicorn's own cycle (decision 0576).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

MAX_HEAD_BYTES = 64 * 1024
_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
_MESSAGE = f"The request head is larger than {MAX_HEAD_BYTES} bytes."


_JOIN_UP_TO = 64 * 1024  # a larger body is written after its head, not copied to join it


class OneWriteAnswer:
    """The transport one request's cycle writes its answer to: the head, written when the
    response starts, is held until the first write of the body and sent with it.

    Everything else passes through: a write before the response starts (`100 Continue`), the
    body's later writes. A held head is written first when the answer ends without a body
    write (an answer to HEAD) and when the cycle closes the connection, so the bytes on the
    wire and their order are as before; only the number of writes changes."""

    __slots__ = ("_cycle", "_head", "_head_seen", "_on_response", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._head_seen = False
        self._on_response: Callable[[], None] = cycle.on_response
        cycle.on_response = self._answered
        cycle.transport = cast(asyncio.Transport, self)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= _JOIN_UP_TO:
                self._transport.write(head + data)
                return
            self._transport.write(head)
        elif not self._head_seen and self._cycle.response_started:
            # The cycle marks the response started just before it writes the head.
            self._head_seen = True
            self._head = bytes(data)
            return
        self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def _answered(self) -> None:
        self._flush()
        self._on_response()

    def _flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that answers 431 to a request head over `MAX_HEAD_BYTES`, and gives
    each request's cycle a transport that writes its answer in one write (`OneWriteAnswer`).

    Only the parser's callbacks and `data_received` are overridden, each around uvicorn's own
    (called through `super()`): a head found too large is answered and the rest of the parse
    is ignored, so uvicorn never makes a cycle for it."""

    _in_head = False  # a message has begun and its head is not complete yet
    _head_bytes = 0  # bytes of whole reads that arrived while the head was incomplete
    _messages = 0  # messages begun on this connection
    _too_large = False  # answered 431; the rest of the connection's bytes are ignored

    def data_received(self, data: bytes) -> None:
        if self._too_large:
            return
        was_in_head, messages = self._in_head, self._messages
        super().data_received(data)
        if self._too_large or self.transport.is_closing():
            return
        # Every byte of this read belongs to the incomplete head when it was being read before
        # and after the read, and no message began in between (pipelining).
        if was_in_head and self._in_head and messages == self._messages:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse()

    def on_message_begin(self) -> None:
        if self._too_large:
            return
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        self._messages += 1

    def on_headers_complete(self) -> None:
        if self._too_large:
            return
        self._in_head = False
        size = len(self.url) + 4 * len(self.headers)  # a loop, not `sum` over a generator
        for name, value in self.headers:
            size += len(name) + len(value)
        if size > MAX_HEAD_BYTES:
            self._refuse()
            return
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not before:  # a request to answer
            OneWriteAnswer(self.transport, cycle)

    def on_body(self, body: bytes) -> None:
        if not self._too_large:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._too_large:
            super().on_message_complete()

    def _refuse(self) -> None:
        self._too_large = True
        self.logger.warning("Request head too large.")
        body = _MESSAGE.encode("ascii")
        content = [_431]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
