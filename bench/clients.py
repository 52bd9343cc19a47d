"""`python -m bench.clients`: client CPU per provider call, async HTTP client against client.

    python -m bench.clients [--requests N] [--rounds R] [--concurrency 1,64]

Starts the lean provider (`bench.lean_provider`) on loopback as its own process and, in this
process (uvloop, nothing else running in it), sends `POST /v1/executions` exactly as the
platform does (credential, a fresh Idempotency-Key, `{"payload": ...}`) through each client,
with `concurrency` calls in flight at once. What it reports is this process's CPU time per call
(`time.process_time`), which is the client's own cost: the provider runs elsewhere. Rounds are
interleaved, and the median round is printed. This is the measurement behind decision 0250.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.harness import HOST, free_port, process

Send = Callable[[str, bytes], Awaitable[int]]


async def _drive(send: Send, *, requests: int, concurrency: int, tag: str) -> tuple[float, float]:
    per_lane = max(1, requests // concurrency)

    async def lane(index: int) -> None:
        for n in range(per_lane):
            status = await send(f"{tag}-{index}-{n}", b'{"payload":{"job":"bench","n":%d}}' % n)
            if status != 200:
                raise RuntimeError(f"provider answered {status}")

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(lane(i) for i in range(concurrency)))
    done = per_lane * concurrency
    return (time.process_time() - cpu) * 1e6 / done, done / (time.perf_counter() - wall)


def _headers(credential: str, key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {credential}",
        "Idempotency-Key": key,
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Accept-Encoding": "identity",
    }


async def _aiohttp(url: str, credential: str) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=100), auto_decompress=False
    )
    target = url + "/v1/executions"

    async def send(key: str, body: bytes) -> int:
        async with session.post(target, data=body, headers=_headers(credential, key)) as answer:
            await answer.read()
            return answer.status

    return send, session.close


async def _httpx(url: str, credential: str) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    client = httpx.AsyncClient(limits=limits, trust_env=False)
    target = url + "/v1/executions"

    async def send(key: str, body: bytes) -> int:
        answer = await client.post(target, content=body, headers=_headers(credential, key))
        return answer.status_code

    return send, client.aclose


async def _httpcore(url: str, credential: str) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import httpcore

    pool = httpcore.AsyncConnectionPool(max_connections=100, max_keepalive_connections=100)
    target = url + "/v1/executions"

    async def send(key: str, body: bytes) -> int:
        headers = list(_headers(credential, key).items())
        answer = await pool.request("POST", target, headers=headers, content=body)
        return answer.status

    return send, pool.aclose


async def _mercato(url: str, credential: str) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from mercato.dispatch.async_client import AsyncProviderClient
    from mercato.providers.schemas import DispatchTarget
    from mercato.settings import Settings

    settings = Settings(
        env="dev", data_dir=Path(tempfile.gettempdir()), allow_private_provider_addresses=True
    )
    client = AsyncProviderClient(settings)
    target = DispatchTarget(
        connection_id="pcon_b", base_url=url, credential=credential, approved=True
    )

    async def send(key: str, body: bytes) -> int:
        answer = await client.execute(
            target,
            idempotency_key=key,
            payload_bytes=body[len(b'{"payload":') : -1],
            response_max_bytes=4096,
            timeout=10.0,
        )
        if answer.error is not None:
            raise RuntimeError(answer.error)
        return answer.status or 0

    return send, client.aclose


CLIENTS: dict[str, Callable[[str, str], Awaitable[tuple[Send, Callable[[], Awaitable[None]]]]]] = {
    "aiohttp": _aiohttp,
    "httpx.AsyncClient": _httpx,
    "httpcore.AsyncConnectionPool": _httpcore,
    "mercato.AsyncProviderClient": _mercato,
}


async def _round(
    name: str, url: str, credential: str, *, requests: int, concurrency: int
) -> tuple[float, float]:
    send, close = await CLIENTS[name](url, credential)
    try:
        tag = secrets.token_hex(4)
        await _drive(send, requests=min(requests, 200), concurrency=concurrency, tag="w" + tag)
        return await _drive(send, requests=requests, concurrency=concurrency, tag=tag)
    finally:
        await close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.clients", description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,64")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args(argv)
    import uvloop

    names = [n for n in args.clients.split(",") if n]
    levels = [int(c) for c in args.concurrency.split(",")]
    credential = "bench-" + secrets.token_urlsafe(16)
    env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="mercato-bench-clients-")) / "provider.log"
    args_ = [sys.executable, "-m", "bench.lean_provider", "--port", str(port)]
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with process(args_, env, log, port) as (url, _pid):
        assert url == f"http://{HOST}:{port}"
        for _ in range(args.rounds):
            for level in levels:
                for name in names:
                    measured = uvloop.run(
                        _round(name, url, credential, requests=args.requests, concurrency=level)
                    )
                    results.setdefault((name, level), []).append(measured)
    width = max(len(n) for n in names)
    print(f"{'client'.ljust(width)}  clients  CPU µs/call (median; rounds)          calls/s")
    for (name, level), rounds in results.items():
        cpus = [round(c) for c, _ in rounds]
        rate = statistics.median(r for _, r in rounds)
        print(
            f"{name.ljust(width)}  {level:7d}  {statistics.median(cpus):6.0f} ({cpus})"
            f"{'':>10}{rate:8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
