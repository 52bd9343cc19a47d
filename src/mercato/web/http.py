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
"""

from __future__ import annotations

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
_MESSAGE = f"The request head is larger than {MAX_HEAD_BYTES} bytes."


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
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._too_large = True
            raise _HeadTooLarge
        super().on_headers_complete()

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
