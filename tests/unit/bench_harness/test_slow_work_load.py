"""The load generator's two variants for slow work (issue 39): `run_burst` sends exactly one
request per client, all at once, and counts every answer however late it comes; `run_load`
with `period` paces each client (a refused call is not sent again at once), and with `stop`
ends when an event is set from another thread.

Its servers are real loopback sockets (asyncio servers in a thread of the test). The server of
the burst holds every answer until it has read all the requests: a generator sending one after
another would never get an answer, so the test only passes when the requests are all in flight
at once."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from builders.listeners import asyncio_server, read_http

ROOT = Path(__file__).parents[3]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
    b"Content-Type: application/problem+json\r\nContent-Length: 43\r\n\r\n"
    b'{"code":"PROVIDER_BUSY","retryAfter":1.0  }'
)


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module("bench.load")


@contextmanager
def held_until(count: int) -> Iterator[tuple[str, list[bytes], list[int]]]:
    """A server that answers no request before it has read `count` of them (each on its own
    connection), then answers them all 200; yields its URL, the requests and, per connection,
    how many requests it carried."""
    seen: list[bytes] = []
    per_connection: list[int] = []
    state: dict[str, asyncio.Event] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        everyone = state.setdefault("all", asyncio.Event())
        carried = 0
        try:
            while True:
                request = await read_http(reader)
                seen.append(request)
                carried += 1
                if len(seen) >= count:
                    everyone.set()
                await everyone.wait()
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        per_connection.append(carried)
        writer.close()

    with asyncio_server(handle) as url:
        yield url, seen, per_connection


def _post(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
    return "POST", "/v1/x", {"Idempotency-Key": f"k-{client}-{n}"}, b"{}"


@pytest.mark.timeout(60)
def test_a_burst_sends_one_request_per_client_all_at_once_and_counts_every_answer(
    load: ModuleType,
) -> None:
    answers: list[int] = []
    with held_until(40) as (url, seen, _per_connection):
        result = load.run_burst(
            url, _post, clients=40, check=lambda status, _body: answers.append(status)
        )
    assert len(seen) == 40  # one request per client, none sent again
    assert sorted(r.split(b"\r\n")[-3] for r in seen) == sorted(
        f"Idempotency-Key: k-{c}-0".encode() for c in range(40)
    )
    assert result.statuses == {200: 40}  # answered after any window a duration would set
    assert result.requests == result.answered == 40
    assert result.errors == 0
    assert answers == [200] * 40
    assert result.seconds > 0  # from the first connect to the last answer, not a duration


@contextmanager
def answering(
    raw: bytes, on_request: Callable[[int], None] = lambda _n: None
) -> Iterator[tuple[str, list[bytes]]]:
    """A keep-alive server that answers every request with `raw` at once; `on_request(n)` is
    called with the count of requests read so far."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                seen.append(await read_http(reader))
                on_request(len(seen))
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    with asyncio_server(handle) as url:
        yield url, seen


@pytest.mark.timeout(60)
def test_a_paced_client_refused_at_once_waits_for_its_turn(load: ModuleType) -> None:
    """Answered 503 at once, an unpaced closed loop would send hundreds of requests in the
    window; paced at one per minute, each of the three clients sends exactly one."""
    with answering(BUSY) as (url, seen):
        result = load.run_load(url, _post, concurrency=3, duration=0.5, warmup=0.0, period=60.0)
    assert len(seen) == 3
    assert sorted(r.split(b"\r\n")[-3] for r in seen) == [
        b"Idempotency-Key: k-0-0",
        b"Idempotency-Key: k-1-0",
        b"Idempotency-Key: k-2-0",
    ]
    assert result.statuses == {503: 3}
    assert result.errors == 0


@pytest.mark.timeout(60)
def test_a_run_ends_when_its_stop_event_is_set(load: ModuleType) -> None:
    """An hour-long run whose server sets the stop event on its fifth request: every client
    ends at its next send, and the run returns (the test's timeout would fail it otherwise)."""
    stop = threading.Event()

    def fifth(n: int) -> None:
        if n >= 5:
            stop.set()

    with answering(OK, fifth) as (url, seen):
        result = load.run_load(url, _post, concurrency=2, duration=3600.0, warmup=0.0, stop=stop)
    assert stop.is_set()
    assert 5 <= len(seen) <= 6  # the fifth, and at most the other client's one in flight
    assert result.statuses[200] == len(seen)
    assert result.errors == 0
