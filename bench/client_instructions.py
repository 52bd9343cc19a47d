"""`python -m bench.client_instructions`: instructions per provider call of the async client.

    python -m bench.client_instructions [--calls 200,1200] [--rounds 2]
        [--client mercato|observed|aiohttp|httpcore|httpx] [--tree LABEL=PATH ...]

Starts the lean provider (`bench.lean_provider`) on loopback, then runs, once per call count,
a process under `valgrind --tool=callgrind` that builds the client as serve builds it (uvloop,
`AsyncProviderClient(settings)`, or `AsyncObservedProviderClient` with `observed`) and sends
that many `POST /v1/executions` one after another (a fresh Idempotency-Key each), every one
answered 200. The instructions per call are the difference between the two counts divided by
the difference in calls, so the process's start-up, imports and first calls cancel out. With
`--tree` the processes run another checkout's code (its `src` first on PYTHONPATH), alternated
per round: `--tree base=/tmp/base --tree new=.`. Counts do not move with load (decision 0417).
The bare clients (`aiohttp`, `httpcore`, `httpx`) send the same request without the guard.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import HOST, free_port, process

_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


async def _child(client: str, url: str, credential: str, calls: int) -> None:
    body = b'{"job":"bench","n":1}'
    wrapped = b'{"payload":' + body + b"}"
    headers = {
        "Accept": "application/json",
        "Accept-Encoding": "identity",
        "Authorization": f"Bearer {credential}",
        "Content-Type": "application/json",
    }
    tag = secrets.token_hex(6)
    if client in ("mercato", "observed"):
        from mercato.dispatch.async_client import AsyncProviderClient
        from mercato.dispatch.observed import AsyncObservedProviderClient
        from mercato.providers.schemas import DispatchTarget
        from mercato.settings import Settings

        settings = Settings(
            env="dev", data_dir=Path(tempfile.gettempdir()), allow_private_provider_addresses=True
        )
        cls = AsyncObservedProviderClient if client == "observed" else AsyncProviderClient
        mercato = cls(settings)
        target = DispatchTarget(
            connection_id="pcon_b", base_url=url, credential=credential, approved=True
        )
        for n in range(calls):
            answer = await mercato.execute(
                target,
                idempotency_key=f"{tag}-{n}",
                payload_bytes=body,
                response_max_bytes=65536,
                timeout=10.0,
            )
            if answer.status != 200 or answer.error is not None:
                raise RuntimeError(f"answer {answer}")
        await mercato.aclose()
    elif client == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(auto_decompress=False)
        for n in range(calls):
            async with session.post(
                url + "/v1/executions",
                data=wrapped,
                headers={**headers, "Idempotency-Key": f"{tag}-{n}"},
            ) as response:
                await response.read()
                assert response.status == 200
        await session.close()
    elif client == "httpcore":
        import httpcore

        pool = httpcore.AsyncConnectionPool(max_connections=100, max_keepalive_connections=100)
        for n in range(calls):
            got = await pool.request(
                "POST",
                url + "/v1/executions",
                headers=[*headers.items(), ("Idempotency-Key", f"{tag}-{n}")],
                content=wrapped,
            )
            assert got.status == 200
        await pool.aclose()
    elif client == "httpx":
        import httpx

        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(limits=limits, trust_env=False) as http:
            for n in range(calls):
                answered = await http.post(
                    url + "/v1/executions",
                    content=wrapped,
                    headers={**headers, "Idempotency-Key": f"{tag}-{n}"},
                )
                assert answered.status_code == 200
    else:
        raise SystemExit(f"unknown client {client}")


def _count(
    tree: Path | None, client: str, url: str, credential: str, calls: int, workdir: Path
) -> int:
    out = workdir / f"callgrind.out.{secrets.token_hex(4)}"
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    args += [sys.executable, "-m", "bench.client_instructions", "--child", client, url]
    args += [credential, str(calls)]
    subprocess.run(args, env=env, check=True, capture_output=True)
    found = _TOTALS.search(out.read_bytes())
    if found is None:
        raise RuntimeError(f"no totals in {out}")
    out.unlink()
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        import uvloop

        client, url, credential, calls = argv[1:5]
        uvloop.run(_child(client, url, credential, int(calls)))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.client_instructions")
    parser.add_argument("--calls", default="200,1200")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--client", default="mercato")
    parser.add_argument("--tree", action="append", default=[])
    args = parser.parse_args(argv)
    low, high = (int(c) for c in args.calls.split(","))
    trees: list[tuple[str, Path | None]] = [
        (label, Path(path).resolve()) for label, path in (t.split("=", 1) for t in args.tree)
    ] or [("this", None)]
    credential = "bench-" + secrets.token_urlsafe(16)
    env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="mercato-client-instr-"))
    provider = [sys.executable, "-m", "bench.lean_provider", "--port", str(port)]
    with process(provider, env, workdir / "provider.log", port) as (url, _pid):
        assert url == f"http://{HOST}:{port}"
        for round_ in range(args.rounds):
            for label, tree in trees:
                few = _count(tree, args.client, url, credential, low, workdir)
                many = _count(tree, args.client, url, credential, high, workdir)
                per = (many - few) / (high - low)
                print(f"round {round_ + 1} {label} {args.client}: {per / 1000:.1f} K instr/call")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
