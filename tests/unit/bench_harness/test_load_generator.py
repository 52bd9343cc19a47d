"""The benchmark's load generator (`bench.load`): it parses every answer shape a server may send,
counts only what was answered, reconnects when a server closes, and fails when none listens.

Its servers here are real loopback sockets (asyncio servers in a thread of the test), so the
bytes cross the kernel as they do in a benchmark run."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from builders.listeners import asyncio_server, read_http

ROOT = Path(__file__).parents[3]


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module("bench.load")


Answer = Callable[[bytes, int], list[bytes]]
"""What the server writes for the n-th request on a connection, each item one write; an empty
item closes the connection there."""


@contextmanager
def server(answer: Answer) -> Iterator[tuple[str, list[bytes]]]:
    """An HTTP/1.1 server on a loopback port that answers each request with `answer`; yields
    its URL and the requests it read whole (head and body)."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        try:
            while True:
                request = await read_http(reader)
                seen.append(request)
                parts = answer(request, n)
                n += 1
                for part in parts:
                    if not part:
                        writer.close()
                        return
                    writer.write(part)
                    await writer.drain()
                if b"connection: close" in parts[0].lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    with asyncio_server(handle) as url:
        yield url, seen


def _factory(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
    return "POST", f"/c{client}/n{n}", {"Idempotency-Key": f"k-{client}-{n}"}, b'{"n":%d}' % n


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra) + body


def test_answers_by_length_chunks_and_split_writes_are_read_whole(load: ModuleType) -> None:
    bodies: list[bytes] = []

    def answer(_request: bytes, n: int) -> list[bytes]:
        body = b'{"answer":%d}' % n
        shape = n % 3
        if shape == 0:
            return [_ok(body)]
        if shape == 1:  # the head and the body in separate writes, the body cut in two
            whole = _ok(body)
            return [whole[:20], whole[20:-3], whole[-3:]]
        chunked = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunked += b"%x\r\n%s\r\n" % (5, body[:5])
        chunked += b"%x;ext=1\r\n%s\r\n0\r\n\r\n" % (len(body) - 5, body[5:])
        return [chunked[:31], chunked[31:]]

    with server(answer) as (url, seen):
        result = load.run_load(
            url,
            _factory,
            concurrency=2,
            duration=0.3,
            warmup=0.0,
            check=lambda status, body: bodies.append(body),
        )
    assert result.errors == 0
    assert result.answered == len(seen) == len(bodies) > 3
    assert set(result.statuses) <= {200, 201} and 201 in result.statuses
    # every body read exactly: the n-th answer on a connection names n
    assert all(body.startswith(b'{"answer":') and body.endswith(b"}") for body in bodies)
    # each request was written whole: its head, the generator's Host and length, its body
    first = seen[0]
    assert first.startswith(b"POST /c")
    assert b"\r\nHost: 127.0.0.1:" in first and b"\r\nIdempotency-Key: k-" in first
    assert first.endswith(b'{"n":0}')


def test_a_connection_the_server_closes_is_opened_again(load: ModuleType) -> None:
    def answer(_request: bytes, n: int) -> list[bytes]:
        return [_ok(b"{}", b"Connection: close\r\n")]

    with server(answer) as (url, seen):
        result = load.run_load(url, _factory, concurrency=1, duration=0.3, warmup=0.0)
    assert result.errors == 0
    assert result.answered == len(seen) >= 2  # each on a new connection
    # every client numbers its requests on, across connections
    assert [request.split(b" ", 2)[1] for request in seen[:2]] == [b"/c0/n0", b"/c0/n1"]


def test_an_answer_never_finished_is_a_failure_not_an_answer(load: ModuleType) -> None:
    def answer(_request: bytes, n: int) -> list[bytes]:
        if n == 1:  # the second request on each connection: half a head, then the close
            return [b"HTTP/1.1 200 OK\r\nConte", b""]
        return [_ok(b"{}")]

    with server(answer) as (url, seen):
        result = load.run_load(url, _factory, concurrency=1, duration=0.3, warmup=0.0)
    assert result.errors >= 1
    assert result.answered == len(seen) - result.errors
    assert set(result.statuses) == {200}


def test_an_answer_that_is_not_http_is_a_failure(load: ModuleType) -> None:
    def answer(request: bytes, _n: int) -> list[bytes]:
        return [b"SMTP ready\r\n\r\n"] if request.startswith(b"POST /c0/n0 ") else [_ok(b"{}")]

    with server(answer) as (url, _seen):
        result = load.run_load(url, _factory, concurrency=1, duration=0.3, warmup=0.0)
    assert result.errors >= 1
    assert set(result.statuses) == {200}


def test_no_server_fails_the_run(load: ModuleType) -> None:
    with server(lambda _r, _n: [_ok(b"{}")]) as (url, _seen):
        pass  # stopped: nothing listens on its port any more
    with pytest.raises(OSError):
        load.run_load(url, _factory, concurrency=2, duration=0.3, warmup=0.0)


def test_answers_outside_the_window_are_not_counted(load: ModuleType) -> None:
    with server(lambda _r, _n: [_ok(b"{}")]) as (url, seen):
        result = load.run_load(url, _factory, concurrency=1, duration=0.2, warmup=0.2)
    # the warm-up's answers are read and counted as answered, but not as measured
    assert result.answered == len(seen)
    assert 0 < result.requests < result.answered
    assert sum(result.statuses.values()) == result.requests == len(result.latencies_ms)
