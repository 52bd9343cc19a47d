"""A small closed-loop HTTP/1.1 load generator on asyncio protocols (keep-alive, no client library).

Each of `concurrency` clients holds one keep-alive connection and sends its next request as soon
as the previous answer is read, for `duration` seconds. Latency is measured per request from the
first byte written to the last byte of the body read. Hand-written on purpose: it costs far less
CPU per request than a general client, which matters when it shares two cores with the servers.

Two variants for slow work (`bench.capacity`, `bench.neighbour`): `run_burst` sends exactly one
request per client, all at once, and counts every answer however late; `run_load(period=P,
stop=event)` paces each client to one request per P seconds (a refused call is not retried at
once, so a flood offers a steady number of calls instead of a busy loop of refusals) and ends
when the event is set, as well as at the end of the duration.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

# (method, path, headers, body) for the n-th request of client c
RequestFactory = Callable[[int, int], tuple[str, str, dict[str, str], bytes]]


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies_ms: list[float] = field(repr=False)
    statuses: Counter[int]
    errors: int
    answered: int = 0  # every answer, warm-up included (for CPU per request)
    client_cpu_seconds: float = 0.0  # the load generator's own CPU over the whole run

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def mean(self) -> float:
        if not self.latencies_ms:
            return float("nan")
        return sum(self.latencies_ms) / len(self.latencies_ms)

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
        return ordered[index]

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate, 1),
            "mean_ms": round(self.mean, 3),
            "p50_ms": round(self.percentile(50), 3),
            "p95_ms": round(self.percentile(95), 3),
            "p99_ms": round(self.percentile(99), 3),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": self.errors,
            "answered": self.answered,
        }


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    chunked = False
    close = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif name == b"connection" and b"close" in value.lower():
            close = True
    if chunked:
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return status, b"".join(parts), close
    body = await reader.readexactly(length) if length else b""
    return status, body, close


def _encode(host: str, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Client(asyncio.Protocol):
    """One closed-loop client on its own keep-alive connection: it writes its next request
    as soon as the previous answer's last byte is read (an asyncio protocol, not streams:
    no coroutine resumed per read, no StreamReader buffer copies; the generator shares the
    machine's cores with the servers it measures, decision 0506)."""

    def __init__(self, run: _Run, index: int) -> None:
        self.run = run
        self.index = index
        self.n = 0
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.began = 0.0
        self.waiting = False  # a request is written and its answer not yet read whole
        self.last: tuple[str, str, dict[str, str], bytes] | None = None
        self.last_data = b""
        self.first_sent = 0.0  # when this client sent its first request (pacing counts from it)
        self.timer: asyncio.TimerHandle | None = None  # a paced client waiting for its turn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.buffer = b""
        self.send_next()

    def send_next(self) -> None:
        run = self.run
        now = time.perf_counter()
        if now >= run.stop or (run.bounded and run.over(self.n)):
            self.finish()
            return
        if run.period and self.n:
            due = self.first_sent + self.n * run.period
            if due >= run.stop:  # its turn would come after the window: it is done
                self.finish()
                return
            if due > now:
                if self.timer is None:
                    self.timer = asyncio.get_running_loop().call_later(due - now, self.due)
                return
        elif not self.n:
            self.first_sent = now
        request = run.factory(self.index, self.n)
        self.n += 1
        if request != self.last:  # the same request again (a replay): its bytes again
            method, path, headers, body = request
            self.last = request
            self.last_data = _encode(run.hostport, method, path, headers, body)
        assert self.transport is not None
        self.waiting = True
        self.began = time.perf_counter()
        self.transport.write(self.last_data)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        try:
            answer = _answer_in(buffer)
        except ValueError:  # not an HTTP/1.1 answer
            self.failed()
            return
        if answer is None:
            self.buffer = buffer
            return
        status, payload, close, used = answer
        # A closed-loop client writes nothing before it has read the answer whole, so
        # anything after the answer is a server error, not the next answer.
        self.buffer = b""
        ended = time.perf_counter()
        self.waiting = False
        run = self.run
        run.answered += 1
        if run.start <= ended <= run.stop:  # answers completed inside the window
            run.latencies.append((ended - self.began) * 1000.0)
            run.statuses[status] += 1
        if run.check is not None:
            run.check(status, payload)
        if close or used != len(buffer):
            assert self.transport is not None
            self.transport.close()  # connection_lost reconnects
            return
        self.send_next()

    def due(self) -> None:
        """A paced client's turn: send, unless it is between connections (`connection_made`
        sends then) or still waiting for an answer."""
        self.timer = None
        if self.transport is not None and not self.waiting:
            self.send_next()

    def failed(self) -> None:
        self.run.failed += 1
        self.waiting = False
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiting:  # the answer never came whole
            self.waiting = False
            self.run.failed += 1
        self.transport = None
        if not self.run.finished(self):
            self.run.reconnect(self)

    def finish(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.run.done(self)
        if self.transport is not None:
            transport, self.transport = self.transport, None
            transport.close()


def _answer_in(buffer: bytes) -> tuple[int, bytes, bool, int] | None:
    """The first whole answer in `buffer`: (status, body, connection close, bytes used); None
    when it is not whole yet. ValueError when it cannot be an HTTP/1.1 answer."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].lower()
    status = int(head[9:12])
    start = end + 4
    close = b"close" in _header_value(head, b"\r\nconnection:")
    if b"chunked" in _header_value(head, b"\r\ntransfer-encoding:"):
        parts: list[bytes] = []
        position = start
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(buffer[position:line_end].split(b";")[0], 16)
            position = line_end + 2
            if size == 0:
                trailer_end = buffer.find(b"\r\n", position)
                if trailer_end < 0:
                    return None
                return status, b"".join(parts), close, trailer_end + 2
            if len(buffer) < position + size + 2:
                return None
            parts.append(buffer[position : position + size])
            position += size + 2
    length = int(_header_value(head, b"\r\ncontent-length:") or b"0")
    if len(buffer) < start + length:
        return None
    return status, buffer[start : start + length], close, start + length


def _header_value(head: bytes, prefix: bytes) -> bytes:
    """The value of the first header line of `head` (lower-cased) that starts with `prefix`
    (CRLF, the name, the colon), without its surrounding spaces; empty when there is none."""
    at = head.find(prefix)
    if at < 0:
        return b""
    line_end = head.find(b"\r\n", at + 2)
    return head[at + len(prefix) : line_end if line_end >= 0 else len(head)].strip()


class _Run:
    """One load run's shared state: the window, the counts, and the clients still running."""

    def __init__(
        self,
        host: str,
        port: int,
        factory: RequestFactory,
        start: float,
        stop: float,
        check: Callable[[int, bytes], None] | None,
        *,
        per_client: int | None = None,
        period: float = 0.0,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.per_client = per_client  # requests each client sends at most (None: no bound)
        self.period = period  # a client's n-th request no earlier than its first + n × period
        self.stop_event = stop_event  # set from any thread: each client ends at its next send
        # whether `over` can ever be true (the headline's closed loop skips the call)
        self.bounded = per_client is not None or stop_event is not None
        self.host, self.port = host, port
        self.hostport = f"{host}:{port}"
        self.factory = factory
        self.start, self.stop = start, stop
        self.check = check
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()
        self.failed = 0
        self.answered = 0
        self.running: set[_Client] = set()
        self.all_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.connecting: set[asyncio.Task[Any]] = set()

    def over(self, sent: int) -> bool:
        """Whether a client that has sent `sent` requests sends no more (besides the window)."""
        if self.per_client is not None and sent >= self.per_client:
            return True
        return self.stop_event is not None and self.stop_event.is_set()

    def done(self, client: _Client) -> None:
        self.running.discard(client)
        if not self.running and not self.all_done.done():
            self.all_done.set_result(None)

    def finished(self, client: _Client) -> bool:
        return client not in self.running

    def reconnect(self, client: _Client) -> None:
        if time.perf_counter() >= self.stop or self.over(client.n):
            self.done(client)
            return
        task = asyncio.ensure_future(self.connect(client))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    async def connect(self, client: _Client) -> None:
        try:
            await asyncio.get_running_loop().create_connection(lambda: client, self.host, self.port)
        except OSError as error:  # the server is gone: the run fails, as a measurement must
            if not self.all_done.done():
                self.all_done.set_exception(error)


async def _run(
    host: str,
    port: int,
    factory: RequestFactory,
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    check: Callable[[int, bytes], None] | None,
    per_client: int | None = None,
    period: float = 0.0,
    stop_event: threading.Event | None = None,
) -> LoadResult:
    began = time.perf_counter()
    start = began + warmup
    run = _Run(
        host,
        port,
        factory,
        start,
        start + duration,
        check,
        per_client=per_client,
        period=period,
        stop_event=stop_event,
    )
    clients = [_Client(run, i) for i in range(concurrency)]
    run.running.update(clients)
    for client in clients:
        run.reconnect(client)
    await run.all_done
    # an unbounded window (a burst) lasted until its last answer
    seconds = duration if math.isfinite(duration) else time.perf_counter() - began
    return LoadResult(
        len(run.latencies), seconds, run.latencies, run.statuses, run.failed, run.answered
    )


def run_load(
    url: str,
    factory: RequestFactory,
    *,
    concurrency: int,
    duration: float,
    warmup: float = 0.5,
    check: Callable[[int, bytes], None] | None = None,
    period: float = 0.0,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Drive `concurrency` keep-alive clients at http://host:port for `duration` seconds.

    Answers completed during the first `warmup` seconds, or after the window, are not counted
    (a request may have started before the window: closed-loop clients never stop sending).
    With `period`, each client sends at most one request per `period` seconds; with `stop`,
    the run also ends once the event is set (each client at its next send).
    """
    host, port = _host_port(url)
    coroutine = _run(
        host,
        port,
        factory,
        concurrency=concurrency,
        duration=duration,
        warmup=warmup,
        check=check,
        period=period,
        stop_event=stop,
    )
    return _timed(_runner(), coroutine)


def run_burst(
    url: str,
    factory: RequestFactory,
    *,
    clients: int,
    check: Callable[[int, bytes], None] | None = None,
) -> LoadResult:
    """`clients` clients at http://host:port, each on its own connection, each sending one
    request at once and no other; every answer is counted however late it comes, and the result's
    seconds are from the first connect to the last answer. A connection lost before its answer is
    an error, not sent again."""
    host, port = _host_port(url)
    coroutine = _run(
        host,
        port,
        factory,
        concurrency=clients,
        duration=math.inf,
        warmup=0.0,
        check=check,
        per_client=1,
    )
    return _timed(_runner(), coroutine)


def _host_port(url: str) -> tuple[str, int]:
    hostport = url.removeprefix("http://").rstrip("/")
    host, _, port = hostport.partition(":")
    return host, int(port)


def _runner() -> Callable[[Coroutine[Any, Any, LoadResult]], LoadResult]:
    try:
        import uvloop

        return uvloop.run
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run


def _timed(
    runner: Callable[[Coroutine[Any, Any, LoadResult]], LoadResult],
    coroutine: Coroutine[Any, Any, LoadResult],
) -> LoadResult:
    """Run `coroutine` to its result, with the CPU this process spent meanwhile."""
    began = time.process_time()
    result: LoadResult = runner(coroutine)
    result.client_cpu_seconds = time.process_time() - began
    return result
