"""A small closed-loop HTTP/1.1 load generator on asyncio streams (keep-alive, no client library).

Each of `concurrency` clients holds one keep-alive connection and sends its next request as soon
as the previous answer is read, for `duration` seconds. Latency is measured per request from the
first byte written to the last byte of the body read. Hand-written on purpose: it costs far less
CPU per request than a general client, which matters when it shares two cores with the servers.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
        parts = []
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


async def _client(
    index: int,
    host: str,
    port: int,
    factory: RequestFactory,
    start: float,
    stop: float,
    latencies: list[float],
    statuses: Counter[int],
    errors: list[int],
    check: Callable[[int, bytes], None] | None,
) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    n = 0
    clock = time.perf_counter
    while clock() < stop:
        if writer is None:
            reader, writer = await asyncio.open_connection(host, port)
        assert reader is not None
        method, path, headers, body = factory(index, n)
        n += 1
        data = _encode(f"{host}:{port}", method, path, headers, body)
        began = clock()
        try:
            writer.write(data)
            status, payload, close = await _read_response(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors[0] += 1
            writer.close()
            writer = None
            continue
        ended = clock()
        errors[1] += 1
        if start <= ended <= stop:  # answers completed inside the window
            latencies.append((ended - began) * 1000.0)
            statuses[status] += 1
        if check is not None:
            check(status, payload)
        if close:
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


async def _run(
    host: str,
    port: int,
    factory: RequestFactory,
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    check: Callable[[int, bytes], None] | None,
) -> LoadResult:
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = [0, 0]  # failed, answered
    start = time.perf_counter() + warmup
    stop = start + duration
    await asyncio.gather(
        *(
            _client(i, host, port, factory, start, stop, latencies, statuses, errors, check)
            for i in range(concurrency)
        )
    )
    return LoadResult(len(latencies), duration, latencies, statuses, errors[0], errors[1])


def run_load(
    url: str,
    factory: RequestFactory,
    *,
    concurrency: int,
    duration: float,
    warmup: float = 0.5,
    check: Callable[[int, bytes], None] | None = None,
) -> LoadResult:
    """Drive `concurrency` keep-alive clients at http://host:port for `duration` seconds.

    Answers completed during the first `warmup` seconds, or after the window, are not counted
    (a request may have started before the window: closed-loop clients never stop sending).
    """
    hostport = url.removeprefix("http://").rstrip("/")
    host, _, port = hostport.partition(":")
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        runner = asyncio.run
    coroutine = _run(
        host,
        int(port),
        factory,
        concurrency=concurrency,
        duration=duration,
        warmup=warmup,
        check=check,
    )
    began = time.process_time()
    result: LoadResult = runner(coroutine)
    result.client_cpu_seconds = time.process_time() - began
    return result
