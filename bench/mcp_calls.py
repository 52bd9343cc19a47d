"""MCP `tools/call` beside the HTTP invoke, in the same run (issue 42, deliverable 5).

Per store, a fresh database seeded as the benchmark seeds it and the lean provider
(`bench.instructions.seeded_store`); one `mercato serve --workers W`; then, in alternated
windows of `--seconds`, closed-loop clients (`bench.load`) making fresh calls (a new key each)
either as `POST …:invoke` or as `POST /mcp` `tools/call` of the same version with the key in
`_meta["mercato/idempotencyKey"]`. Per window: calls/s, p50, and serve's CPU (its process tree)
per call; a call counts when it answered 200 (and for MCP, a result that is not an error).

The MCP requests are those the SDK's own client sends: on protocol 2026-07-28 (the default)
each request carries its envelope (`_meta` protocol version, client info and capabilities, and
the `Mcp-Method`/`Mcp-Name` headers); with `--protocol 2025-11-25`, what a handshake-era client
sends after its handshake, which the SDK serves statelessly without one.

    python -m bench.mcp_calls [--stores sqlite,postgresql] [--workers 2] [--clients 16]
        [--seconds 5] [--windows 3] [--protocol 2026-07-28]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.harness import (
    DEFAULT_PG_ADMIN,
    SERVICE,
    VERSION,
    Target,
    _tree_cpu_seconds,
    free_port,
    invoke_factory,
    process,
)
from bench.instructions import seeded_store
from bench.load import RequestFactory, run_load

TOOL = f"{SERVICE.replace('.', '_')}__{VERSION}"
MODERN = "2026-07-28"


def mcp_factory(target: Target, tag: str, protocol: str = MODERN) -> RequestFactory:
    """A fresh `tools/call` of the benchmark's version per request (a new key each)."""
    headers = {
        "Authorization": f"Bearer {target.seeded.api_key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": protocol,
    }
    envelope: dict[str, Any] = {}
    if protocol == MODERN:
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": TOOL})
        envelope = {
            "io.modelcontextprotocol/protocolVersion": protocol,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }

    def make(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
        key = f"bench-{target.run_id}-{tag}-{client}-{n}"
        message = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {
                "name": TOOL,
                "arguments": {"job": "bench", "n": n},
                "_meta": {"mercato/idempotencyKey": key, **envelope},
            },
        }
        return "POST", "/mcp", headers, orjson.dumps(message)

    return make


def _checker(kind: str, counts: Counter[str]) -> Callable[[int, bytes], None]:
    def check(status: int, body: bytes) -> None:
        settled = status == 200 and (kind == "invoke" or b'"isError":false' in body)
        counts["settled" if settled else f"other-{status}"] += 1

    return check


def window(
    kind: str,
    target: Target,
    url: str,
    pid: int,
    *,
    clients: int,
    seconds: float,
    tag: str,
    protocol: str = MODERN,
) -> dict[str, Any]:
    mcp = kind == "mcp"
    factory = mcp_factory(target, tag, protocol) if mcp else invoke_factory(target, tag)
    counts: Counter[str] = Counter()
    before = _tree_cpu_seconds(pid)
    result = run_load(
        url,
        factory,
        concurrency=clients,
        duration=seconds,
        check=_checker(kind, counts),
    )
    cpu = _tree_cpu_seconds(pid) - before
    return {
        "kind": kind,
        "calls_per_s": round(result.rate, 1),
        "p50_ms": round(result.percentile(50), 2),
        "serve_cpu_ms_per_call": round(1000 * cpu / max(result.answered, 1), 3),
        "answers": dict(counts),
        "errors": result.errors,
    }


def run_store(store: str, options: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with seeded_store(store, workdir, options.pg_admin_url) as (env, target, _db_url):
        port = free_port()
        args = [sys.executable, "-m", "mercato", "serve", "--port", str(port)]
        args += ["--workers", str(options.workers)]
        with process(args, env, workdir / "serve.log", port) as (url, pid):
            for kind in ("invoke", "mcp"):  # warm both paths, not counted
                window(
                    kind,
                    target,
                    url,
                    pid,
                    clients=options.clients,
                    seconds=1,
                    tag="warm",
                    protocol=options.protocol,
                )
            for n in range(options.windows):
                for kind in ("invoke", "mcp") if n % 2 == 0 else ("mcp", "invoke"):
                    options.say(f"[{store}] window {n + 1} {kind}")
                    row = window(
                        kind,
                        target,
                        url,
                        pid,
                        clients=options.clients,
                        seconds=options.seconds,
                        tag=f"w{n}",
                        protocol=options.protocol,
                    )
                    rows.append({"store": store, "window": n + 1} | row)
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per store: the median calls/s and CPU per call of each kind, and MCP's share of invoke."""
    out = []
    for store in dict.fromkeys(row["store"] for row in rows):
        of = {
            kind: [r for r in rows if r["store"] == store and r["kind"] == kind]
            for kind in ("invoke", "mcp")
        }
        rate = {k: statistics.median(r["calls_per_s"] for r in v) for k, v in of.items()}
        cpu = {k: statistics.median(r["serve_cpu_ms_per_call"] for r in v) for k, v in of.items()}
        share = round(rate["mcp"] / rate["invoke"], 3) if rate["invoke"] else None
        out.append(
            {
                "store": store,
                "invoke_calls_per_s": rate["invoke"],
                "mcp_calls_per_s": rate["mcp"],
                "mcp_over_invoke": share,
                "invoke_cpu_ms_per_call": cpu["invoke"],
                "mcp_cpu_ms_per_call": cpu["mcp"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_calls")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--protocol", default=MODERN, choices=[MODERN, "2025-11-25"])
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    options = parser.parse_args()
    options.say = lambda m: print(m, file=sys.stderr, flush=True)
    rows: list[dict[str, Any]] = []
    for store in options.stores.split(","):
        workdir = Path(tempfile.mkdtemp(prefix="mercato-mcp-bench-"))
        try:
            rows += run_store(store, options, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"windows": rows, "summary": summary(rows)}, indent=2))


if __name__ == "__main__":
    main()
