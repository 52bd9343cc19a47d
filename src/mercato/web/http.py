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

And it checks a response's header names and values once per answer, not once per header
(`CheckedOnceCycle`, decision 0497).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any, cast

import httptools
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

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


def _refused_by(pattern: re.Pattern[bytes]) -> bytes:
    """The bytes `pattern` (a class of single bytes) finds: a string has one exactly when the
    pattern's search finds something in it."""
    return bytes(octet for octet in range(256) if pattern.fullmatch(bytes([octet])))


_NAME_REFUSED = _refused_by(HEADER_RE)
_VALUE_REFUSED = _refused_by(HEADER_VALUE_RE)


class CheckedOnceCycle(RequestResponseCycle):
    """uvicorn's request-response cycle, whose `send` checks a response's header names and
    values all at once, not by two regex searches per header (decision 0497).

    uvicorn refuses a name with a byte of `HEADER_RE` and a value with one of
    `HEADER_VALUE_RE` (CR and LF among them). Both are classes of single bytes: a header has
    one exactly when the concatenation of all the names (or values) has one, and that is
    when deleting those bytes (`bytes.translate`, a table lookup per byte instead of the
    regex engine's walk of the class) shortens it. When they find one (or cannot run:
    headers that are not bytes), the headers are checked one by one as uvicorn checks them,
    raising its error for the header it names first. Everything else is uvicorn 0.54's `send`
    line for line (a test pins its source), so the bytes written, the errors and the cycle's
    state are the same, but for one guard: the access line's fields are worked out only when
    the access logger would write it (decision 0502)."""

    async def send(self, message: ASGISendEvent) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()  # pragma: no cover

        if self.disconnected:
            return  # pragma: no cover

        if not self.response_started:
            # Sending response status line and headers
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self.response_started = True
            self.waiting_for_100_continue = False

            status_code = message["status"]
            headers = self.default_headers + list(message.get("headers", []))
            try:  # no side effects; anything odd is left to the checks header by header
                names = b"".join([name for name, _ in headers])
                values = b"".join([value for _, value in headers])
                checked = len(names.translate(None, _NAME_REFUSED)) == len(names) and len(
                    values.translate(None, _VALUE_REFUSED)
                ) == len(values)
            except Exception:
                checked = False

            # The access line's fields only when the line would be written: `mercato serve`
            # routes uvicorn's access logger to the root handler at WARNING (`core.logs`), so
            # `hasHandlers()` (uvicorn's `access_log`) is true and the line is always dropped,
            # after its client address and its path quoted with urllib (decision 0502).
            if self.access_log and self.access_logger.isEnabledFor(logging.INFO):
                self.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    get_client_addr(self.scope),
                    self.scope["method"],
                    get_path_with_query_string(self.scope),
                    self.scope["http_version"],
                    status_code,
                )

            # Write response status line and headers
            content = [STATUS_LINE[status_code]]
            has_connection_close = False

            for name, value in headers:
                if not checked:  # uvicorn's checks, their order and their errors
                    if HEADER_RE.search(name):
                        raise RuntimeError("Invalid HTTP header name.")
                    if HEADER_VALUE_RE.search(value):
                        raise RuntimeError("Invalid HTTP header value.")

                name = name.lower()
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value.decode())
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection":
                    connection = [token.lower().strip() for token in value.split(b",")]
                    if b"close" in connection:
                        self.keep_alive = False
                        has_connection_close = True
                content.extend([name, b": ", value, b"\r\n"])

            if not self.keep_alive and not has_connection_close:
                content.append(b"connection: close\r\n")

            if (
                self.chunked_encoding is None
                and self.scope["method"] != "HEAD"
                and status_code not in (204, 304)
            ):
                # Neither content-length nor transfer-encoding specified
                self.chunked_encoding = True
                content.append(b"transfer-encoding: chunked\r\n")

            content.append(b"\r\n")
            self.transport.write(b"".join(content))

        elif not self.response_complete:
            # Sending response body
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )

            body = message.get("body", b"")
            more_body = message.get("more_body", False)

            # Write response body
            if self.scope["method"] == "HEAD":
                self.expected_content_length = 0
            elif self.chunked_encoding:
                content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
                if not more_body:
                    content.append(b"0\r\n\r\n")
                self.transport.write(b"".join(content))
            else:
                num_bytes = len(body)
                if num_bytes > self.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                else:
                    self.expected_content_length -= num_bytes
                self.transport.write(body)

            # Handle response completion
            if not more_body:
                if self.expected_content_length != 0:
                    raise RuntimeError("Response content shorter than Content-Length")
                self.response_complete = True
                self.message_event.set()
                if not self.keep_alive:
                    self.transport.close()
                self.on_response()

        else:
            # Response already sent
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already "
                "completed."
            )


class _HeadTooLarge(Exception):
    """Raised from the parser's callback; ends the parse (httptools wraps it)."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that answers 431 to a request head over `MAX_HEAD_BYTES`."""

    _in_head = False  # a message has begun and its head is not complete yet
    _head_bytes = 0  # bytes of whole reads that arrived while the head was incomplete
    _messages = 0  # messages begun on this connection
    _too_large = False

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        was_in_head, messages = self._in_head, self._messages
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._too_large:
                self._send_431()
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        # Every byte of this read belongs to the incomplete head when it was being read before
        # and after the read, and no message began in between (pipelining).
        if was_in_head and self._in_head and messages == self._messages:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._send_431()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        self._messages += 1

    def on_headers_complete(self) -> None:
        self._in_head = False
        size = len(self.url) + 4 * len(self.headers)  # a loop, not `sum` over a generator
        for name, value in self.headers:
            size += len(name) + len(value)
        if size > MAX_HEAD_BYTES:
            self._too_large = True
            raise _HeadTooLarge
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not before:  # a request to answer
            cycle.__class__ = CheckedOnceCycle  # same state, its `send` (decision 0497)
            OneWriteAnswer(self.transport, cycle)

    def _send_431(self) -> None:
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
