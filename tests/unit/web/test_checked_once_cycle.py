"""`CheckedOnceCycle` (decision 0497) against uvicorn's own `RequestResponseCycle`: for any
answer, the same bytes written, the same error (type and message) and the same state after each
message; a header the app built with CR or LF (or any character uvicorn refuses) is refused."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    RequestResponseCycle,
)

from mercato.web.http import _NAME_REFUSED, _VALUE_REFUSED, CheckedOnceCycle

# uvicorn 0.54's `RequestResponseCycle.send`, of which `CheckedOnceCycle.send` is a copy with
# the checks done once: when uvicorn's changes, compare the two again and update this.
UVICORN_SEND_SHA256 = "abdd8601b326a8da972436918d3a954e1ef39c6bf0cd9e1c1954c2e798d0bb9c"

_STATE = (
    "response_started",
    "response_complete",
    "keep_alive",
    "chunked_encoding",
    "expected_content_length",
    "waiting_for_100_continue",
)


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(kind: type[RequestResponseCycle], method: str, access_log: bool) -> Any:
    transport = _Transport()
    answered: list[bool] = []
    cycle = kind(
        scope={  # type: ignore[typeddict-item]
            "type": "http",
            "method": method,
            "path": "/x",
            "query_string": b"",
            "http_version": "1.1",
            "client": ("127.0.0.1", 1),
        },
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test.cycle"),
        access_logger=logging.getLogger("test.cycle.access"),
        access_log=access_log,
        default_headers=[(b"server", b"uvicorn"), (b"date", b"Fri, 27 Nov 2026 10:00:00 GMT")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: answered.append(True),
    )
    return cycle, transport, answered


def _outcome(
    kind: type[RequestResponseCycle],
    messages: list[dict[str, Any]],
    method: str = "GET",
    access_log: bool = False,
) -> list[Any]:
    async def run() -> list[Any]:
        cycle, transport, answered = _cycle(kind, method, access_log)
        seen: list[Any] = []
        for message in messages:
            try:
                await cycle.send(message)
                error = None
            except Exception as exc:
                error = (type(exc), str(exc))
            seen.append(
                (
                    error,
                    list(transport.writes),
                    transport.closed,
                    len(answered),
                    tuple(getattr(cycle, name) for name in _STATE),
                )
            )
            if error is not None:
                break
        return seen

    return asyncio.run(run())


def _same(messages: list[dict[str, Any]], method: str = "GET", access_log: bool = False) -> Any:
    ours = _outcome(CheckedOnceCycle, messages, method, access_log)
    assert ours == _outcome(RequestResponseCycle, messages, method, access_log)
    return ours


def _start(headers: Any, status: int = 200) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": headers}


def _body(body: bytes = b"", more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": body, "more_body": more}


def test_uvicorns_send_is_the_one_copied() -> None:
    source = inspect.getsource(RequestResponseCycle.send)
    assert hashlib.sha256(source.encode()).hexdigest() == UVICORN_SEND_SHA256


@pytest.mark.parametrize(
    "value",
    [b"a\r\nSet-Cookie: x=1", b"a\nb", b"a\rb", b"\x00", b"a\x7f", b"\x1b[0m"],
)
def test_a_value_the_app_built_with_a_control_character_is_refused(value: bytes) -> None:
    headers = [(b"content-length", b"2"), (b"x-request-id", value)]
    ((error, writes, *_),) = _same([_start(headers), _body(b"ok")])
    assert error == (RuntimeError, "Invalid HTTP header value.")
    assert writes == []


@pytest.mark.parametrize("name", [b"x id", b"x:id", b"x\r\nid", b"x\tid", b"(x)", b""])
def test_a_bad_name_is_refused(name: bytes) -> None:
    ((error, writes, *_),) = _same([_start([(name, b"v"), (b"content-length", b"0")])])
    if name:
        assert error == (RuntimeError, "Invalid HTTP header name.")
        assert writes == []


def test_the_first_bad_header_names_the_error_as_uvicorn_does() -> None:
    headers = [(b"x-a", b"bad\n"), (b"bad name", b"v")]
    ((error, *_),) = _same([_start(headers)])
    assert error == (RuntimeError, "Invalid HTTP header value.")
    headers = [(b"bad name", b"v"), (b"x-a", b"bad\n")]
    ((error, *_),) = _same([_start(headers)])
    assert error == (RuntimeError, "Invalid HTTP header name.")


def test_a_tab_in_a_value_passes_as_in_uvicorn() -> None:
    ((error, writes, *_), _) = _same(
        [_start([(b"content-length", b"2"), (b"x-a", b"a\tb")]), _body(b"ok")]
    )
    assert error is None and b"x-a: a\tb\r\n" in writes[0]


_ODD: list[Any] = [
    [("content-length", "2")],  # text, not bytes
    [(b"content-length", "2")],
    [(b"content-length", b"2", b"extra")],
    [(b"content-length", b"two")],
    [(b"content-length", b"2"), (b"connection", b"keep-alive, Close")],
    [(b"Transfer-Encoding", b"CHUNKED")],
    [(b"content-length", b"2"), (b"content-length", b"5")],
    [],
    "generator",
    [(bytearray(b"content-length"), bytearray(b"2"))],
    [(memoryview(b"content-length"), b"2")],
]


@pytest.mark.parametrize("headers", _ODD)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_odd_answers_end_as_in_uvicorn(headers: Any, method: str) -> None:
    def made() -> Any:  # a fresh iterable for each cycle
        if headers == "generator":
            return (h for h in [(b"content-length", b"2")])
        return headers

    ours = _outcome(CheckedOnceCycle, [_start(made()), _body(b"ok")], method)
    assert ours == _outcome(RequestResponseCycle, [_start(made()), _body(b"ok")], method)


@pytest.mark.parametrize("status", [200, 204, 304, 404, 500])
@pytest.mark.parametrize("access_log", [False, True])
def test_statuses_streams_and_the_access_log_as_in_uvicorn(status: int, access_log: bool) -> None:
    _same([_start([(b"x-a", b"1")], status), _body(b"a", True), _body(b"b")], access_log=access_log)
    _same([_start([], status), _body()], access_log=access_log)


def test_messages_out_of_order_as_in_uvicorn() -> None:
    _same([_body(b"x")])
    _same([_start([(b"content-length", b"1")]), _start([])])
    _same([_start([(b"content-length", b"1")]), _body(b"x"), _body(b"y")])
    _same([_start([(b"content-length", b"1")]), _body(b"xy")])
    _same([_start([(b"content-length", b"3")]), _body(b"xy")])
    _same([{"type": "http.response.start", "headers": []}])


_octets = st.binary(max_size=12) | st.sampled_from(
    [b"content-length", b"transfer-encoding", b"connection", b"chunked", b"close", b"3"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_octets, _octets), max_size=6),
    st.sampled_from(["GET", "HEAD"]),
    st.sampled_from([200, 204, 304]),
    st.binary(max_size=4),
)
def test_any_headers_end_as_in_uvicorn(
    headers: list[tuple[bytes, bytes]], method: str, status: int, body: bytes
) -> None:
    _same([_start(headers, status), _body(body)], method)


def test_uvicorns_header_patterns_are_the_byte_classes_translated() -> None:
    """`_NAME_REFUSED`/`_VALUE_REFUSED` are derived from uvicorn's patterns, which must stay
    classes of single bytes for a deletion to find what their search finds."""
    assert HEADER_RE.pattern == b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]'
    assert HEADER_VALUE_RE.pattern == b"[\x00-\x08\x0a-\x1f\x7f]"
    assert b"\r" in _VALUE_REFUSED and b"\n" in _VALUE_REFUSED and b"\t" not in _VALUE_REFUSED


@given(st.binary(max_size=40))
def test_a_deletion_finds_what_the_search_finds(data: bytes) -> None:
    for pattern, refused in ((HEADER_RE, _NAME_REFUSED), (HEADER_VALUE_RE, _VALUE_REFUSED)):
        found = pattern.search(data) is not None
        assert found == (len(data.translate(None, refused)) != len(data))


def _answer_logged(kind: type[RequestResponseCycle], level: int) -> list[str]:
    """The access lines written for a plain answer (which must end without an error)."""
    access = logging.getLogger("test.cycle.access")
    lines: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = _Keep()
    access.addHandler(handler)
    access.setLevel(level)
    try:
        seen = _outcome(kind, [_start([(b"content-length", b"2")]), _body(b"ok")], access_log=True)
        assert [error for error, *_ in seen] == [None, None]
    finally:
        access.removeHandler(handler)
        access.setLevel(logging.NOTSET)
    return lines


def test_the_access_line_is_uvicorns_when_its_logger_writes_it() -> None:
    ours = _answer_logged(CheckedOnceCycle, logging.INFO)
    assert ours == _answer_logged(RequestResponseCycle, logging.INFO)
    assert ours == ['127.0.0.1:1 - "GET /x HTTP/1.1" 200']


def test_a_dropped_access_line_costs_no_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision 0502: serve's access logger is at WARNING (core.logs), its line always dropped;
    its client address and quoted path are not worked out for nothing."""

    def refuse(_scope: Any) -> str:
        raise AssertionError("an access-line field worked out for a dropped line")

    monkeypatch.setattr("mercato.web.http.get_path_with_query_string", refuse)
    monkeypatch.setattr("mercato.web.http.get_client_addr", refuse)
    assert _answer_logged(CheckedOnceCycle, logging.WARNING) == []
