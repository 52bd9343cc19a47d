"""Orchestrates one benchmark run: processes, seeding, scenarios, ledger check, result files.

Per store, two providers run as their own processes: the headline reference, a lean
contract-correct FastAPI provider with its idempotency records in memory (`bench.lean_provider`,
the kind of provider a user would compare against), and the SDK provider with its durable store
(`bench.provider`, the second line). Each is measured alone and through `mercato serve` in the
same run; the ratios compare those rates. Beside `mercato serve` run two floors, loaded like
its invoke: the product's engine on a bare route (`bench.floor`, decision 0362) and the leanest
path written by hand (`bench.leanest`, decision 0363: the same durable work with no layers, its
rate, CPU, one-client p50 and replays). After the run, `verify-ledger` must be balanced and
every accepted call settled exactly once, or the run fails (`LedgerCheckFailed`).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import text

from bench.load import LoadResult, RequestFactory, run_load

HOST = "127.0.0.1"
SERVICE = "bench.echo"  # on the lean provider (the headline)
SDK_SERVICE = "bench.echo-sdk"  # on the SDK provider (the second line)
VERSION = "v1"
PRICE = 1
GRANT = 1_000_000_000
CALLER = "caller@bench.example"
OWNER = "provider@bench.example"
RESULTS = Path(__file__).parent / "results"
DEFAULT_PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class Options:
    duration: float = 10.0
    concurrency: int = 64
    stores: tuple[str, ...] = ("sqlite", "postgresql")
    workers: int = 2
    growth: bool = False
    growth_invocations: int = 1_000_000
    growth_listings: int = 10_000
    pg_admin_url: str = DEFAULT_PG_ADMIN
    out_dir: Path = RESULTS
    chart: bool = True
    say: Callable[[str], None] = field(default=lambda m: print(m, file=sys.stderr, flush=True))
    step: Callable[[str], None] = field(default=lambda _label: None)
    """Called as each measurement starts, with what it measures (a progress bar's hook)."""


REPLAY_ROUNDS = 3
"""The replay ratio's rounds: each the lean provider alone then the platform's replays, for
`duration / REPLAY_ROUNDS` seconds each, so that drift in the machine hits both sides (0507)."""

MEASUREMENTS_PER_RUN = 13 + 2 * REPLAY_ROUNDS
"""How many times `run_scenarios(..., full=True)` calls `step` (each replay round's two windows
are a step each)."""


def measurements(options: Options) -> int:
    """How many measurements a run of `options` makes (the progress bar's total)."""
    per_store = MEASUREMENTS_PER_RUN * (2 if options.growth else 1)
    return per_store * len(options.stores)


# --- processes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _live(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"{url} exited with {process.returncode}")
    try:
        return httpx.get(url + "/health/live", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def process(
    args: list[str], env: dict[str, str], log: Path, port: int
) -> Iterator[tuple[str, int]]:
    """Start a server process, wait until /health/live answers, stop it (SIGTERM) at the end."""
    with log.open("ab") as handle:
        child = subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)
        url = f"http://{HOST}:{port}"
        try:
            wait_until(lambda: _live(url, child), f"{args[2:4]} to start")
            yield url, child.pid
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(20)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait(10)


def mercato(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@contextmanager
def database(store: str, workdir: Path, pg_admin_url: str) -> Iterator[str]:
    """A fresh database of the store: a SQLite file, or a throwaway PostgreSQL database."""
    if store == "sqlite":
        yield f"sqlite:///{workdir / 'mercato.db'}"
        return
    import psycopg

    name = f"mercato_bench_{secrets.token_hex(4)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_admin_url.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def platform_env(db_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(
        MERCATO_ENV="dev",
        MERCATO_DATABASE_URL=db_url,
        MERCATO_DATA_DIR=str(data_dir),
    )
    return env


# --- seeding -----------------------------------------------------------------------------


@dataclass
class Seeded:
    api_key: str
    caller_id: str
    credential: str


class LedgerCheckFailed(Exception):
    """A run ended with the ledger unbalanced or an accepted call not settled exactly once."""

    def __init__(self, result: dict[str, Any], failures: list[str]) -> None:
        self.result = result
        self.failures = failures
        super().__init__("; ".join(failures))


def contract() -> dict[str, Any]:
    from mercato.catalog.examples import example_contract

    base = example_contract()
    base.pop("artifactContract", None)
    base.update(
        requestMaxBytes=1024,
        responseMaxBytes=4096,
        requestSchema={
            "type": "object",
            "required": ["job"],
            "properties": {"job": {"type": "string"}, "n": {"type": "integer"}},
        },
        resultSchema={"type": "object", "required": ["echo"]},
    )
    return base


def seed(runtime: Any, *, providers: dict[str, str], credential: str) -> Seeded:
    """Accounts, points, a big quota, an API key, and for each (service code, provider URL) of
    `providers` a version `v1` on its own checked and approved connection."""
    from mercato.accounts import service as accounts
    from mercato.ledger import service as ledger
    from mercato.quotas import service as quotas

    now = runtime.clock.now()
    with runtime.db.transaction() as session:
        caller = accounts.create_account(
            session, email=CALLER, password=None, is_staff=False, now=now
        )
        owner = accounts.create_account(
            session, email=OWNER, password=None, is_staff=False, now=now
        )
        caller_id, owner_id = caller.id, owner.id
        ledger.grant(session, account_id=caller_id, amount=GRANT, now=now, memo="bench")
        quotas.set_quota(
            session,
            account_id=caller_id,
            policy="bench",
            limit=1_000_000_000,
            window_seconds=60,
            now=now,
        )
        api_key = accounts.create_api_key(session, account_id=caller_id, name="bench", now=now)
        key = api_key.api_key
    for service, provider_url in providers.items():
        _publish(
            runtime, owner_id, service=service, provider_url=provider_url, credential=credential
        )
    return Seeded(api_key=key, caller_id=caller_id, credential=credential)


def _publish(
    runtime: Any, owner_id: str, *, service: str, provider_url: str, credential: str
) -> None:
    from mercato.catalog import service as catalog
    from mercato.cli.commands_catalog import connection_facts
    from mercato.conformance.flows import submit_connection
    from mercato.dispatch.client import ProviderClient
    from mercato.providers import service as providers

    with ProviderClient(runtime.settings) as client:
        submitted = submit_connection(
            runtime,
            client,
            owner_id=owner_id,
            name=service.replace(".", "-"),
            base_url=provider_url,
            credential=credential,
        )
    if submitted.run is None or not submitted.run.passed:
        raise RuntimeError(f"the provider of {service} failed conformance: {submitted.run}")
    with runtime.db.transaction() as session:
        providers.approve_connection(
            session, connection_id=submitted.connection_id, now=runtime.clock.now()
        )
    with runtime.db.transaction() as session:
        catalog.publish(
            session,
            service_code=service,
            display_name=service.replace(".", " "),
            version=VERSION,
            connection=connection_facts(session, connection_id=submitted.connection_id),
            price=PRICE,
            contract=contract(),
            description="a benchmark echo service",
            now=runtime.clock.now(),
        )


# --- CPU accounting (robust where wall-clock rates are not: a shared, loaded machine) ------


def _tree_cpu_seconds(pid: int, *, system_only: bool = False) -> float:
    """User + system (or, with `system_only`, system) CPU seconds of `pid` and its live
    descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks = int(fields[12]) + (0 if system_only else int(fields[11]))
        stats[int(entry.name)] = (int(fields[1]), ticks / tick)
    total, frontier = 0.0, [pid]
    while frontier:
        current = frontier.pop()
        total += stats.get(current, (0, 0.0))[1]
        frontier += [child for child, (parent, _) in stats.items() if parent == current]
    return total


Window = tuple[LoadResult, float | None]
"""One measured load and the CPU seconds the measured server's process tree spent during it
(None when no process was named)."""


def measure_window(pid: int, load: Callable[[], LoadResult]) -> Window:
    """Run `load`, with the CPU seconds the process tree of `pid` spent meanwhile."""
    before = _tree_cpu_seconds(pid) if pid else 0.0
    result = load()
    return result, (_tree_cpu_seconds(pid) - before if pid else None)


def summarised(result: LoadResult, cpu_seconds: float | None) -> dict[str, Any]:
    """`result`'s summary, with the CPU milliseconds the server process tree spent per answer."""
    summary = result.summary()
    summary["cpu_ms_per_request"] = (
        round(1000 * cpu_seconds / result.answered, 3)
        if cpu_seconds is not None and result.answered
        else None
    )
    summary["_rate"] = result.rate
    summary["_p50"] = result.percentile(50)
    return summary


def measured(pid: int, load: Callable[[], LoadResult]) -> dict[str, Any]:
    """Run `load` and add the CPU milliseconds the server process tree spent per request."""
    return summarised(*measure_window(pid, load))


def merge_windows(windows: Sequence[Window]) -> Window:
    """Several windows of one load as one: requests, seconds, answers (warm-up included),
    errors, statuses, the generator's CPU and the server tree's CPU summed, the latency samples
    pooled. Its rate is then the total requests over the total seconds, its percentiles are over
    every sample, and its CPU per request is the CPU summed over the answers summed. The server's
    CPU is None if any window has none."""
    results = [result for result, _ in windows]
    statuses: Counter[int] = Counter()
    for result in results:
        statuses.update(result.statuses)
    merged = LoadResult(
        requests=sum(result.requests for result in results),
        seconds=sum(result.seconds for result in results),
        latencies_ms=[sample for result in results for sample in result.latencies_ms],
        statuses=statuses,
        errors=sum(result.errors for result in results),
        answered=sum(result.answered for result in results),
        client_cpu_seconds=sum(result.client_cpu_seconds for result in results),
    )
    spent = [cpu for _, cpu in windows]
    return merged, (None if any(cpu is None for cpu in spent) else sum(cpu or 0.0 for cpu in spent))


@dataclass
class Alternated:
    """Two loads measured in alternated windows (`alternate`)."""

    base: dict[str, Any]  # the first load, its windows merged (`summarised`)
    measured: dict[str, Any]  # the second load, its windows merged
    rounds: list[dict[str, float]]  # each round's two rates: {"provider": …, "replays": …}
    ratio: float | None  # measured's rate over base's: total over total seconds, each side


def alternate(
    base: Callable[[int, float], Window],
    measure: Callable[[int, float], Window],
    *,
    rounds: int,
    seconds: float,
) -> Alternated:
    """`rounds` rounds, each `base(round, seconds / rounds)` immediately followed by
    `measure(round, seconds / rounds)`; each side's windows merged (`merge_windows`), and the
    ratio of their merged rates. Whatever slows or speeds the machine within the run falls on
    both sides alike (0507), where one window of each, one after the other, would put the drift
    between them into the quotient."""
    each = seconds / rounds
    base_windows: list[Window] = []
    measured_windows: list[Window] = []
    shown: list[dict[str, float]] = []
    for index in range(rounds):
        alone = base(index, each)
        base_windows.append(alone)
        got = measure(index, each)
        measured_windows.append(got)
        shown.append({"provider": round(alone[0].rate, 1), "replays": round(got[0].rate, 1)})
    merged_base = summarised(*merge_windows(base_windows))
    merged = summarised(*merge_windows(measured_windows))
    ratio = round(merged["_rate"] / merged_base["_rate"], 4) if merged_base["_rate"] else None
    return Alternated(merged_base, merged, shown, ratio)


# --- scenarios ---------------------------------------------------------------------------


@dataclass
class Target:
    platform: str
    provider: str  # the lean provider (headline reference)
    seeded: Seeded
    platform_pid: int = 0
    provider_pid: int = 0
    sdk_provider: str = ""  # the SDK provider (second line)
    sdk_provider_pid: int = 0
    floor: str = ""  # bench/floor.py: the product's engine on a bare route (the measured floor)
    floor_pid: int = 0
    leanest: str = ""  # bench/leanest.py: the invoke written by hand, no layers (0363)
    leanest_pid: int = 0
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    invoke_answers: Counter[int] = field(default_factory=Counter)


def _json_headers(token: str, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


INVOKE_PATH = f"/v1/services/{SERVICE}/versions/{VERSION}:invoke"
SDK_INVOKE_PATH = f"/v1/services/{SDK_SERVICE}/versions/{VERSION}:invoke"


def direct_factory(target: Target, tag: str) -> RequestFactory:
    """What the platform sends the provider for one call: a fresh key, the wrapped payload."""
    credential = target.seeded.credential

    def make(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
        key = f"direct-{target.run_id}-{tag}-{client}-{n}"
        body = b'{"payload":{"job":"bench","n":%d}}' % n
        return "POST", "/v1/executions", _json_headers(credential, key), body

    return make


def invoke_factory(target: Target, tag: str, path: str = INVOKE_PATH) -> RequestFactory:
    api_key = target.seeded.api_key

    def make(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
        key = f"bench-{target.run_id}-{tag}-{client}-{n}"
        return "POST", path, _json_headers(api_key, key), b'{"job":"bench","n":%d}' % n

    return make


def replay_factory(target: Target, key: str) -> RequestFactory:
    """The same invoke again and again, with one Idempotency-Key (answered from the store)."""
    headers = _json_headers(target.seeded.api_key, key)

    def make(_client: int, _n: int) -> tuple[str, str, dict[str, str], bytes]:
        return "POST", INVOKE_PATH, headers, b'{"job":"bench","n":0}'

    return make


def get_factory(path: str, token: str | None = None) -> RequestFactory:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def make(_client: int, _n: int) -> tuple[str, str, dict[str, str], bytes]:
        return "GET", path, headers, b""

    return make


def _counting(answers: Counter[int]) -> Callable[[int, bytes], None]:
    def check(status: int, _body: bytes) -> None:
        answers[status] += 1

    return check


def invoke_load(
    target: Target,
    tag: str,
    *,
    concurrency: int,
    duration: float,
    path: str = INVOKE_PATH,
    url: str | None = None,
) -> LoadResult:
    return run_load(
        url or target.platform,
        invoke_factory(target, tag, path),
        concurrency=concurrency,
        duration=duration,
        check=_counting(target.invoke_answers),
    )


def receipts_depth(target: Target, pages: int) -> dict[str, Any]:
    """Follow the receipts cursor `pages` deep, timing each page (one client, sequential)."""
    headers = {"Authorization": f"Bearer {target.seeded.api_key}"}
    timings: list[float] = []
    cursor: str | None = None
    with httpx.Client(base_url=target.platform, headers=headers, timeout=30) as client:
        for _ in range(pages):
            params = {"limit": "20", **({"cursor": cursor} if cursor else {})}
            began = time.perf_counter()
            response = client.get("/v1/invocations", params=params)
            timings.append((time.perf_counter() - began) * 1000)
            response.raise_for_status()
            cursor = response.json()["nextCursor"]
            if cursor is None:
                break
    ordered = sorted(timings)
    return {
        "pages": len(timings),
        "first_ms": round(timings[0], 3),
        "last_ms": round(timings[-1], 3),
        "median_ms": round(ordered[len(ordered) // 2], 3),
        "max_ms": round(ordered[-1], 3),
    }


def run_scenarios(
    target: Target,
    *,
    tag: str,
    concurrency: int,
    duration: float,
    full: bool,
    step: Callable[[str], None] = lambda _label: None,
) -> dict[str, Any]:
    """The lean provider alone, then the platform calling it, with the same load; then the SDK
    provider alone and through the platform (the second line); then the lean provider alone
    and replays in alternated windows (the replay ratio's two sides, 0505, 0507); catalog,
    receipts. `step(label)` is called as each measurement starts."""
    out: dict[str, Any] = {}
    provider, platform = target.provider_pid, target.platform_pid

    def direct_window(
        clients: int, seconds: float, suffix: str, *, sdk: bool = False, label: str = ""
    ) -> Window:
        step(f"{tag}: {label}the {'SDK' if sdk else 'lean'} provider alone, {clients} client(s)")
        factory = direct_factory(target, tag + suffix)
        url, pid = (
            (target.sdk_provider, target.sdk_provider_pid) if sdk else (target.provider, provider)
        )
        return measure_window(
            pid,
            lambda: run_load(url, factory, concurrency=clients, duration=seconds),
        )

    def direct(clients: int, seconds: float, suffix: str, *, sdk: bool = False) -> dict[str, Any]:
        return summarised(*direct_window(clients, seconds, suffix, sdk=sdk))

    def invokes(clients: int, seconds: float, suffix: str, *, sdk: bool = False) -> dict[str, Any]:
        path = SDK_INVOKE_PATH if sdk else INVOKE_PATH
        step(f"{tag}: invoke{' (SDK provider)' if sdk else ''}, {clients} client(s)")
        return measured(
            platform,
            lambda: invoke_load(
                target, tag + suffix, concurrency=clients, duration=seconds, path=path
            ),
        )

    def reads_window(
        factory: RequestFactory, clients: int, seconds: float, *, label: str = "reads"
    ) -> Window:
        step(f"{tag}: {label}, {clients} client(s)")
        return measure_window(
            platform,
            lambda: run_load(target.platform, factory, concurrency=clients, duration=seconds),
        )

    def reads(factory: RequestFactory, clients: int, seconds: float) -> dict[str, Any]:
        return summarised(*reads_window(factory, clients, seconds))

    base = direct(concurrency, duration, "")
    out["provider_direct"] = base
    out["invoke"] = invokes(concurrency, duration, "")
    out["ratio"] = round(out["invoke"]["_rate"] / base["_rate"], 4) if base["_rate"] else None
    # Little's law for a closed loop: mean latency = clients / throughput. The platform cannot
    # serve calls faster than the provider serves them alone, so no platform could have a mean
    # invoke latency below this at this concurrency, on this machine, in this run.
    out["closed_loop_floor_ms"] = (
        round(1000 * concurrency / base["_rate"], 3) if base["_rate"] else None
    )
    # The two floors of the same run, loaded like the invoke: the same engine on a bare
    # Starlette route (bench/floor.py, 0362), and the same durable work written by hand
    # (bench/leanest.py, 0363).
    floors = (
        (
            "engine_floor",
            "f",
            "the engine on a bare route (the floor)",
            target.floor,
            target.floor_pid,
        ),
        ("leanest", "l", "the leanest path (by hand)", target.leanest, target.leanest_pid),
    )
    for name, suffix, label, url, pid in floors:
        if not url:
            continue
        step(f"{tag}: {label}, {concurrency} client(s)")
        got = measured(
            pid,
            functools.partial(
                invoke_load,
                target,
                tag + suffix,
                concurrency=concurrency,
                duration=duration,
                url=url,
            ),
        )
        out[name] = got
        out[f"{name}_ratio"] = round(got["_rate"] / base["_rate"], 4) if base["_rate"] else None
    if target.leanest:
        out["leanest_cpu_ms"] = out["leanest"]["cpu_ms_per_request"]
    if target.sdk_provider:
        sdk_base = direct(concurrency, duration, "s", sdk=True)
        sdk_invoke = invokes(concurrency, duration, "s", sdk=True)
        out["sdk_provider"] = {
            "provider_direct": sdk_base,
            "invoke": sdk_invoke,
            "ratio": round(sdk_invoke["_rate"] / sdk_base["_rate"], 4)
            if sdk_base["_rate"]
            else None,
            "closed_loop_floor_ms": (
                round(1000 * concurrency / sdk_base["_rate"], 3) if sdk_base["_rate"] else None
            ),
        }
    short = max(duration / 2, 1.0)
    if full:
        one_direct = direct(1, short, "1")
        one_platform = invokes(1, short, "1")
        out["one_client"] = {
            "provider_direct": one_direct,
            "invoke": one_platform,
            "added_p50_ms": round(one_platform["_p50"] - one_direct["_p50"], 3),
        }
        if target.leanest:
            step(f"{tag}: the leanest path (by hand), 1 client(s)")
            one_leanest = measured(
                target.leanest_pid,
                lambda: invoke_load(
                    target, tag + "l1", concurrency=1, duration=short, url=target.leanest
                ),
            )
            out["one_client"]["leanest"] = one_leanest
            out["leanest_added_p50_ms"] = round(one_leanest["_p50"] - one_direct["_p50"], 3)
        replay_key = f"replay-{target.run_id}-{tag}"
        first = httpx.post(
            target.platform + INVOKE_PATH,
            content=b'{"job":"bench","n":0}',
            headers=_json_headers(target.seeded.api_key, replay_key),
            timeout=30,
        )
        target.invoke_answers[first.status_code] += 1
        # The replay ratio's two sides, measured in alternated windows: REPLAY_ROUNDS rounds of
        # the lean provider alone (fresh keys, suffix "r1", "r2", …) immediately followed by the
        # replays, `duration / REPLAY_ROUNDS` seconds each; each side is its windows merged, so
        # drift in the machine falls on both (0507). Not `base`, taken minutes earlier (0505):
        # the quotient over it stays in the result as `replay_ratio_first_base`.
        replays = replay_factory(target, replay_key)

        def round_label(index: int) -> str:
            return f"replay round {index + 1}/{REPLAY_ROUNDS}: "

        alternated = alternate(
            lambda index, seconds: direct_window(
                concurrency, seconds, f"r{index + 1}", label=round_label(index)
            ),
            lambda index, seconds: reads_window(
                replays, concurrency, seconds, label=round_label(index) + "replays"
            ),
            rounds=REPLAY_ROUNDS,
            seconds=duration,
        )
        replay_base = alternated.base
        out["replay_provider_direct"] = replay_base
        out["replay"] = alternated.measured
        out["replay_rounds"] = alternated.rounds
        out["replay_ratio"] = alternated.ratio
        out["replay_ratio_first_base"] = (
            round(out["replay"]["_rate"] / base["_rate"], 4) if base["_rate"] else None
        )
        if target.leanest:
            # the same replay key: its stored answer, read from the same store; one window after
            # the rounds, over the provider alone merged from them (0507)
            step(f"{tag}: leanest-path replays, {concurrency} client(s)")
            out["leanest_replay"] = measured(
                target.leanest_pid,
                lambda: run_load(
                    target.leanest,
                    replay_factory(target, replay_key),
                    concurrency=concurrency,
                    duration=duration,
                ),
            )
            out["leanest_replay_ratio"] = (
                round(out["leanest_replay"]["_rate"] / replay_base["_rate"], 4)
                if replay_base["_rate"]
                else None
            )
        out["catalog"] = reads(get_factory("/v1/catalog/listings?limit=20"), concurrency, short)
    receipts = get_factory("/v1/invocations?limit=20", target.seeded.api_key)
    out["receipts"] = reads(receipts, min(concurrency, 16), short)
    step(f"{tag}: receipts 50 pages deep")
    out["receipts_depth"] = receipts_depth(target, 50)
    _drop_private(out)
    return out


def _drop_private(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k in value if k.startswith("_")]:
            del value[key]
        for item in value.values():
            _drop_private(item)


# --- the ledger check --------------------------------------------------------------------


def ledger_check(runtime: Any, env: dict[str, str], target: Target) -> dict[str, Any]:
    """verify-ledger, and every accepted call of this run settled (or released) exactly once."""
    verify = mercato("admin", "verify-ledger", "--json", env=env)
    try:
        report = json.loads(verify.stdout)
    except json.JSONDecodeError:
        report = {"balanced": False, "problems": [verify.stdout[-500:], verify.stderr[-500:]]}
    # rows the growth option preloaded carry `prior-` keys and no reservation: not this run's
    with runtime.db.read() as session:
        by_state = {
            f"{state}/{settlement}": int(count)
            for state, settlement, count in session.execute(
                text(
                    "SELECT state, settlement, count(*) FROM invocations i "
                    "WHERE i.idempotency_key NOT LIKE 'prior-%' GROUP BY state, settlement"
                )
            )
        }
        pairs = {
            f"{settlement}/{reservation or 'NONE'}": int(count)
            for settlement, reservation, count in session.execute(
                text(
                    "SELECT i.settlement, r.state, count(*) FROM invocations i "
                    "LEFT JOIN reservations r ON r.reference = i.id "
                    "WHERE i.idempotency_key NOT LIKE 'prior-%' GROUP BY i.settlement, r.state"
                )
            )
        }
        held = int(
            session.scalar(text("SELECT count(*) FROM reservations WHERE state = 'HELD'")) or 0
        )
        settled_transfers = int(
            session.scalar(
                text(
                    "SELECT count(*) - count(DISTINCT reference) FROM ledger_transfers "
                    "WHERE kind = 'settle'"
                )
            )
            or 0
        )
        # The calls of this run left unfinished, to be looked up in the processes' logs by
        # their request ids (kept with the work directory when the check fails); the key names
        # the measurement that sent it (`invoke_factory`: its tag, client and number), and so
        # the process: the leanest path (tag suffix `l`, `l1`) keeps no request id.
        unsettled = [
            {
                "id": id_,
                "state": state,
                "settlement": settlement,
                "request_id": request_id,
                "idempotency_key": key,
            }
            for id_, state, settlement, request_id, key in session.execute(
                text(
                    "SELECT id, state, settlement, request_id, idempotency_key FROM invocations "
                    "WHERE idempotency_key NOT LIKE 'prior-%' "
                    "AND settlement NOT IN ('SETTLED', 'RELEASED') ORDER BY id LIMIT 5"
                )
            )
        ]
    accepted = sum(by_state.values())
    settled = by_state.get("SUCCEEDED/SETTLED", 0)
    released = by_state.get("FAILED/RELEASED", 0)
    consistent = set(pairs) <= {"SETTLED/SETTLED", "RELEASED/RELEASED"}
    ok_200 = target.invoke_answers.get(200, 0)
    exactly_once = (
        accepted == settled + released
        and held == 0
        and consistent
        and settled_transfers == 0
        and settled == ok_200
    )
    return {
        "verify_ledger_balanced": bool(report.get("balanced")),
        "verify_ledger_problems": report.get("problems", [])[:5],
        "accepted": accepted,
        "settled": settled,
        "released": released,
        "by_state": by_state,
        "invocation_vs_reservation": pairs,
        "held_reservations": held,
        "answers_200": ok_200,
        "answers_by_status": {str(k): v for k, v in sorted(target.invoke_answers.items())},
        "unsettled": unsettled,
        "duplicate_settle_transfers": settled_transfers,
        "every_accepted_call_settled_once": exactly_once,
    }


# --- growth ------------------------------------------------------------------------------


def _copy_value(value: Any) -> Any:
    return orjson.dumps(value).decode() if isinstance(value, dict | list) else value


def _bulk_insert(runtime: Any, table: Any, rows: Iterator[dict[str, Any]], chunk: int) -> None:
    """COPY on PostgreSQL, executemany on SQLite; in one transaction per chunk."""
    columns = [c.name for c in table.columns]
    if runtime.db.engine.dialect.name == "postgresql":
        with runtime.db.engine.connect() as conn:
            raw = conn.connection.driver_connection
            with raw.cursor() as cursor:
                names = ", ".join(f'"{c}"' for c in columns)
                with cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row([_copy_value(row[c]) for c in columns])
            raw.commit()
            raw.execute(f"ANALYZE {table.name}")
            raw.commit()
        return
    batch: list[dict[str, Any]] = []
    with runtime.db.engine.begin() as conn:
        for row in rows:
            batch.append(row)
            if len(batch) >= chunk:
                conn.execute(table.insert(), batch)
                batch = []
        if batch:
            conn.execute(table.insert(), batch)
        conn.exec_driver_sql(f"ANALYZE {table.name}")


def preload(runtime: Any, *, invocations: int, listings: int, say: Callable[[str], None]) -> float:
    """Clone the run's first settled invocation `invocations` times (keys `prior-N`, newest
    first in the receipts) and the bench listing with its version `listings` times."""
    from sqlalchemy import select

    from mercato.core.ids import new_id
    from mercato.db.base import Base
    from mercato.db.models import load_all

    load_all()
    began = time.monotonic()
    tables = Base.metadata.tables
    inv, lst, ver = tables["invocations"], tables["listings"], tables["versions"]
    with runtime.db.engine.connect() as conn:
        template = dict(
            conn.execute(select(inv).where(inv.c.state == "SUCCEEDED").order_by(inv.c.id).limit(1))
            .mappings()
            .one()
        )
        listing = dict(
            conn.execute(select(lst).where(lst.c.service_code == SERVICE)).mappings().one()
        )
        version = dict(
            conn.execute(select(ver).where(ver.c.listing_id == listing["id"])).mappings().one()
        )

    def invocation_rows() -> Iterator[dict[str, Any]]:
        for i in range(invocations):
            row_id = new_id("inv")
            yield {
                **template,
                "id": row_id,
                "idempotency_key": f"prior-{i}",
                "provider_key": f"mercato:{row_id}",
                "reservation_id": f"prior-{i}",
            }

    def listing_rows() -> Iterator[dict[str, Any]]:
        for i in range(listings):
            yield {**listing, "id": new_id("lst"), "service_code": f"bench.growth-{i:05d}"}

    # The invocation rows this run's empty measurements left dead (every settle is a non-HOT
    # update) are vacuumed first, so that the bulk load fills their space as a store growing
    # under autovacuum would have (decision 0410). Vacuumed only after the load, their
    # thousands of pages took the grown measurement's first inserts: each page first touched
    # after the checkpoint below, a full-page image in the WAL and a read.
    _maintain(runtime, f"VACUUM {inv.name}")
    _bulk_insert(runtime, lst, listing_rows(), 5_000)
    with runtime.db.engine.connect() as conn:
        ids = [
            r[0]
            for r in conn.execute(select(lst.c.id).where(lst.c.service_code.like("bench.growth-%")))
        ]
    _bulk_insert(
        runtime, ver, ({**version, "id": new_id("ver"), "listing_id": i} for i in ids), 5_000
    )
    say(f"  preloaded {listings} listings")
    _bulk_insert(runtime, inv, invocation_rows(), 20_000)
    seconds = time.monotonic() - began
    say(f"  preloaded {invocations} invocations in {seconds:.0f}s")
    _settle_after_bulk_load(runtime)
    return seconds


def _settle_after_bulk_load(runtime: Any) -> None:
    """Measure the grown store, not the bulk load's aftermath: checkpoint the database and
    flush the operating system's dirty pages (a gigabyte written back in the background
    otherwise slows every process on the machine, the provider included, while measuring)."""
    # What autovacuum would otherwise do in the middle of the measurement: a load this size
    # triggers its insert-driven VACUUM and an ANALYZE of each grown table. Then the
    # checkpoint, so that neither leaves dirty pages behind. The tables the load did not grow
    # are analyzed, not vacuumed: a VACUUM would free the space of the rows the empty
    # measurements left dead, and the grown measurement's inserts would go there, each page
    # first touched after the checkpoint (a full-page image in the WAL) and read back
    # (decision 0410); their churn stays as the empty measurements left it.
    grown = ", ".join(GROWN_TABLES)
    _maintain(runtime, f"VACUUM (ANALYZE) {grown}", "ANALYZE", "CHECKPOINT")
    os.sync()


GROWN_TABLES = ("invocations", "listings", "versions")
"""The tables `preload` grows."""


def settle_before_measuring(runtime: Any) -> None:
    """The empty store, before its measurements in a growth run, just checkpointed as the
    grown one will be (the first change to each page after a checkpoint writes the page's
    image to the WAL), so that the two are measured in the same state (decision 0410). Not
    analyzed: statistics of near-empty tables, never refreshed with autovacuum off, turn the
    ledger triggers' and foreign keys' lookups into sequential scans as the tables grow."""
    _maintain(runtime, "CHECKPOINT")
    os.sync()


def _maintain(runtime: Any, *statements: str) -> None:
    """Run maintenance statements on PostgreSQL (outside a transaction); on SQLite, checkpoint
    the write-ahead log."""
    # On the driver's connection, outside any transaction (Mercato's SQLite engine begins
    # every SQLAlchemy transaction IMMEDIATE, and a checkpoint cannot run inside one).
    raw = runtime.db.engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        if runtime.db.engine.dialect.name == "postgresql":
            driver.rollback()
            driver.autocommit = True
            for statement in statements:
                driver.execute(statement)
            driver.autocommit = False
        else:
            busy, frames, copied = driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:  # a reader held the log: the measurement would start from a long WAL
                print(
                    f"warning: the SQLite checkpoint was blocked ({copied} of {frames} frames)",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        raw.close()


# --- one store, the whole run --------------------------------------------------------------


def run_store(store: str, options: Options, workdir: Path) -> dict[str, Any]:
    from mercato.db.runtime import Runtime
    from mercato.settings import Settings

    say = options.say
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True)
    result: dict[str, Any] = {"store": store, "configurations": {}}
    with database(store, workdir, options.pg_admin_url) as db_url:
        env = platform_env(db_url, data_dir)
        migrated = mercato("migrate", env=env)
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed: {migrated.stderr[-2000:]}")
        credential = "bench-" + secrets.token_urlsafe(24)
        provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
        provider_port, sdk_port, serve_port = free_port(), free_port(), free_port()
        provider_args = [sys.executable, "-m", "bench.lean_provider", "--port", str(provider_port)]
        sdk_args = [sys.executable, "-m", "bench.provider", "--port", str(sdk_port)]
        sdk_args += ["--store", str(workdir / "provider.db")]
        serve_args = [sys.executable, "-m", "mercato", "serve", "--port", str(serve_port)]
        serve_args += ["--workers", str(options.workers)]
        floor_port = free_port()
        floor_args = [sys.executable, "-m", "bench.floor", "--port", str(floor_port)]
        floor_args += ["--workers", str(options.workers)]
        leanest_port = free_port()
        leanest_args = [sys.executable, "-m", "bench.leanest", "--port", str(leanest_port)]
        leanest_args += ["--workers", str(options.workers)]
        runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))
        try:
            with (
                process(provider_args, provider_env, workdir / "provider.log", provider_port) as (
                    provider_url,
                    provider_pid,
                ),
                process(sdk_args, provider_env, workdir / "sdk-provider.log", sdk_port) as (
                    sdk_url,
                    sdk_pid,
                ),
            ):
                seeded = seed(
                    runtime,
                    providers={SERVICE: provider_url, SDK_SERVICE: sdk_url},
                    credential=credential,
                )
                say(f"[{store}] seeded; starting serve --workers {options.workers}")
                with (
                    process(serve_args, env, workdir / "serve.log", serve_port) as serve,
                    process(floor_args, env, workdir / "floor.log", floor_port) as floor,
                    process(leanest_args, env, workdir / "leanest.log", leanest_port) as leanest,
                ):
                    target = Target(
                        platform=serve[0],
                        provider=provider_url,
                        seeded=seeded,
                        platform_pid=serve[1],
                        provider_pid=provider_pid,
                        sdk_provider=sdk_url,
                        sdk_provider_pid=sdk_pid,
                        floor=floor[0],
                        floor_pid=floor[1],
                        leanest=leanest[0],
                        leanest_pid=leanest[1],
                    )
                    if options.growth:
                        settle_before_measuring(runtime)
                    say(f"[{store}] load: {options.concurrency} clients, {options.duration}s each")
                    result["configurations"][store] = run_scenarios(
                        target,
                        tag="e",
                        concurrency=options.concurrency,
                        duration=options.duration,
                        full=True,
                        step=options.step,
                    )
                    if options.growth:
                        say(f"[{store}] growth: preloading")
                        seconds = preload(
                            runtime,
                            invocations=options.growth_invocations,
                            listings=options.growth_listings,
                            say=say,
                        )
                        name = f"{store}+growth"
                        grown = run_scenarios(
                            target,
                            tag="g",
                            concurrency=options.concurrency,
                            duration=options.duration,
                            full=True,
                            step=options.step,
                        )
                        grown["preload"] = {
                            "invocations": options.growth_invocations,
                            "listings": options.growth_listings,
                            "seconds": round(seconds, 1),
                        }
                        empty = result["configurations"][store]
                        grown["invoke_vs_empty"] = round(
                            grown["invoke"]["rate"] / empty["invoke"]["rate"], 4
                        )
                        result["configurations"][name] = grown
                result["ledger"] = ledger = ledger_check(runtime, env, target)
                say(f"[{store}] {ledger_line(ledger)}")
        finally:
            runtime.db.dispose()
    return result


def run(options: Options) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "started_at": started.isoformat(),
        "options": {
            "duration": options.duration,
            "concurrency": options.concurrency,
            "stores": list(options.stores),
            "workers": options.workers,
            "growth": options.growth,
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "stores": {},
    }
    for store in options.stores:
        workdir = Path(tempfile.mkdtemp(prefix=f"mercato-bench-{store}-"))
        keep = False
        try:
            result["stores"][store] = data = run_store(store, options, workdir)
            # A failed ledger check keeps the database and the processes' logs to look into.
            keep = not ledger_ok(data.get("ledger", {}))
        finally:
            if keep:
                print(f"[{store}] ledger check failed: kept {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    path = options.out_dir / f"{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    result["json_path"] = str(path)
    if options.chart:
        result["chart_path"] = chart(result, options.out_dir / f"{stamp}.png")
    failures = [
        f"{store}: {ledger_line(data.get('ledger', {}))}"
        for store, data in result["stores"].items()
        if not ledger_ok(data.get("ledger", {}))
    ]
    if failures:
        raise LedgerCheckFailed(result, failures)
    return result


def ledger_ok(ledger: dict[str, Any]) -> bool:
    """verify-ledger balanced, and every accepted call of the run settled exactly once."""
    return (
        ledger.get("verify_ledger_balanced") is True
        and ledger.get("every_accepted_call_settled_once") is True
    )


def ledger_line(ledger: dict[str, Any]) -> str:
    return (
        f"verify-ledger balanced={ledger.get('verify_ledger_balanced')}; "
        f"accepted={ledger.get('accepted')} settled={ledger.get('settled')} "
        f"released={ledger.get('released')} held={ledger.get('held_reservations')} "
        f"200s={ledger.get('answers_200')}; every accepted call settled exactly once="
        f"{ledger.get('every_accepted_call_settled_once')}"
        + (
            ""
            if ledger.get("every_accepted_call_settled_once", True)
            else f"; answers by status {ledger.get('answers_by_status')}; "
            f"unsettled {ledger.get('unsettled')}"
        )
    )


# --- output ------------------------------------------------------------------------------


REPLAY_RATIO_NOTE = (
    f"replay ×: replays/s over the lean provider alone/s, both measured in {REPLAY_ROUNDS} "
    "alternated rounds (the provider alone, then the replays, each for a share of the duration), "
    "each side's total over its summed seconds (JSON replay_provider_direct, replay, "
    "replay_rounds), not over the 'provider alone/s' column measured minutes earlier; replays "
    "over that first measurement: JSON replay_ratio_first_base; the leanest path's replays: one "
    "window after the rounds, over the same provider rate (0505, 0507)"
)
"""The table's footnote saying what the replay ratio divides by."""


def table(result: dict[str, Any]) -> str:
    rows = [
        (
            "configuration",
            "invokes/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "provider alone/s",
            "provider p50/p99",
            "floor ms",
            "ratio",
            "+p50@1 ms",
            "replays/s",
            "replay ×",
            "catalog/s",
            "receipts p50",
            "cpu ms/invoke",
            "cpu ms/provider call",
        )
    ]
    for store in result["stores"].values():
        for name, c in store["configurations"].items():
            one = c.get("one_client", {})
            rows.append(
                (
                    name,
                    f"{c['invoke']['rate']:.0f}",
                    f"{c['invoke']['p50_ms']:.2f}",
                    f"{c['invoke']['p95_ms']:.2f}",
                    f"{c['invoke']['p99_ms']:.2f}",
                    f"{c['provider_direct']['rate']:.0f}",
                    f"{c['provider_direct']['p50_ms']:.1f}/{c['provider_direct']['p99_ms']:.1f}",
                    _ms(c.get("closed_loop_floor_ms")),
                    f"{c['ratio']:.3f}" if c.get("ratio") is not None else "-",
                    f"{one['added_p50_ms']:.2f}" if one else "-",
                    f"{c['replay']['rate']:.0f}" if "replay" in c else "-",
                    f"{c['replay_ratio']:.2f}" if c.get("replay_ratio") is not None else "-",
                    f"{c['catalog']['rate']:.0f}" if "catalog" in c else "-",
                    f"{c['receipts']['p50_ms']:.2f}",
                    _cpu(c["invoke"]),
                    _cpu(c["provider_direct"]),
                )
            )
            floor = c.get("engine_floor")
            if floor:
                rows.append(
                    (
                        f"{name} (engine on a bare route)",
                        f"{floor['rate']:.0f}",
                        f"{floor['p50_ms']:.2f}",
                        f"{floor['p95_ms']:.2f}",
                        f"{floor['p99_ms']:.2f}",
                        f"{c['provider_direct']['rate']:.0f}",
                        "-",
                        "-",
                        f"{c['engine_floor_ratio']:.3f}"
                        if c.get("engine_floor_ratio") is not None
                        else "-",
                        *("-", "-", "-", "-", "-"),
                        _cpu(floor),
                        "-",
                    )
                )
            lean = c.get("leanest")
            if lean:
                lean_replay = c.get("leanest_replay")
                rows.append(
                    (
                        f"{name} (leanest path, by hand)",
                        f"{lean['rate']:.0f}",
                        f"{lean['p50_ms']:.2f}",
                        f"{lean['p95_ms']:.2f}",
                        f"{lean['p99_ms']:.2f}",
                        f"{c['provider_direct']['rate']:.0f}",
                        "-",
                        "-",
                        f"{c['leanest_ratio']:.3f}" if c.get("leanest_ratio") is not None else "-",
                        f"{c['leanest_added_p50_ms']:.2f}" if "leanest_added_p50_ms" in c else "-",
                        f"{lean_replay['rate']:.0f}" if lean_replay else "-",
                        f"{c['leanest_replay_ratio']:.2f}"
                        if c.get("leanest_replay_ratio") is not None
                        else "-",
                        *("-", "-"),
                        _cpu(lean),
                        "-",
                    )
                )
            sdk = c.get("sdk_provider")
            if sdk:
                rows.append(
                    (
                        f"{name} (SDK provider)",
                        f"{sdk['invoke']['rate']:.0f}",
                        f"{sdk['invoke']['p50_ms']:.2f}",
                        f"{sdk['invoke']['p95_ms']:.2f}",
                        f"{sdk['invoke']['p99_ms']:.2f}",
                        f"{sdk['provider_direct']['rate']:.0f}",
                        f"{sdk['provider_direct']['p50_ms']:.1f}/"
                        f"{sdk['provider_direct']['p99_ms']:.1f}",
                        _ms(sdk.get("closed_loop_floor_ms")),
                        f"{sdk['ratio']:.3f}" if sdk.get("ratio") is not None else "-",
                        *("-", "-", "-", "-", "-"),
                        _cpu(sdk["invoke"]),
                        _cpu(sdk["provider_direct"]),
                    )
                )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        "provider: the lean FastAPI provider with in-memory idempotency records (the headline "
        "reference); '(SDK provider)' rows: the SDK provider with its durable store; "
        "'(engine on a bare route)' rows: bench/floor.py, the same engine without FastAPI or "
        "middleware; '(leanest path, by hand)' rows: bench/leanest.py, the same durable work "
        "written by hand with no layers, the leanest invoke this machine serves (0363)"
    )
    lines.append(
        "ratio: invokes/s over the same provider alone, same run; floor ms: the lowest mean "
        "invoke latency any platform could have at this concurrency (clients / the provider's "
        "own rate in this run); replay ×: replays/s over the provider alone"
    )
    lines.append(REPLAY_RATIO_NOTE)
    for store, data in result["stores"].items():
        lines.append(f"{store}: {ledger_line(data.get('ledger', {}))}")
        for name, c in data["configurations"].items():
            depth = c["receipts_depth"]
            extra = f" invoke vs empty={c['invoke_vs_empty']:.3f}" if "invoke_vs_empty" in c else ""
            lines.append(
                f"{name}: receipts {depth['pages']} pages deep: first {depth['first_ms']} ms, "
                f"median {depth['median_ms']} ms, last {depth['last_ms']} ms{extra}"
            )
            again = c.get("replay_provider_direct")
            if again and c.get("replay_ratio_first_base") is not None:
                rounds = " ".join(
                    f"{r['provider']:.0f}/{r['replays']:.0f}" for r in c.get("replay_rounds", [])
                )
                lines.append(
                    f"{name}: replay × divides by the provider alone in windows alternated with "
                    f"the replays, {again['rate']:.0f}/s (rounds, provider/replays per s: "
                    f"{rounds or '-'}; first measurement {c['provider_direct']['rate']:.0f}"
                    f"/s; replays over it {c['replay_ratio_first_base']:.2f}×)"
                )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cpu(summary: dict[str, Any]) -> str:
    value = summary.get("cpu_ms_per_request")
    return "-" if value is None else f"{value:.2f}"


def chart(result: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names, invoke, direct, replay, catalog = [], [], [], [], []
    p50, p99, direct_p99, floor = [], [], [], []
    for store in result["stores"].values():
        for name, c in store["configurations"].items():
            names.append(name)
            invoke.append(c["invoke"]["rate"])
            direct.append(c["provider_direct"]["rate"])
            replay.append(c.get("replay", {}).get("rate", 0))
            catalog.append(c.get("catalog", {}).get("rate", 0))
            p50.append(c["invoke"]["p50_ms"])
            p99.append(c["invoke"]["p99_ms"])
            direct_p99.append(c["provider_direct"]["p99_ms"])
            floor.append(c.get("closed_loop_floor_ms") or 0)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = range(len(names))
    width = 0.2
    for offset, (label, values) in enumerate(
        [("provider direct", direct), ("invoke", invoke), ("replay", replay), ("catalog", catalog)]
    ):
        left.bar([i + (offset - 1.5) * width for i in x], values, width, label=label)
    left.set_xticks(list(x), names)
    left.set_ylabel("requests/s")
    left.set_title(f"throughput, {result['options']['concurrency']} clients")
    left.margins(y=0.25)  # room above the bars for the legend
    left.legend(loc="upper center", ncol=4, fontsize="small")
    for offset, (label, values) in enumerate(
        [
            ("invoke p50", p50),
            ("invoke p99", p99),
            ("provider direct p99", direct_p99),
            ("closed-loop floor (mean)", floor),
        ]
    ):
        right.bar([i + (offset - 1.5) * width for i in x], values, width, label=label)
    right.set_xticks(list(x), names)
    right.set_ylabel("ms")
    right.set_title("latency")
    right.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
