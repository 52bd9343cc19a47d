"""Pieces shared by the slow-work measurements (`bench.capacity`, `bench.neighbour`, issue 39).

Calls that ask the lean provider to sleep (its `sleep` payload member), a tally of answers by
status and problem `code`, the process limits that bound how many sockets a process may hold,
samples of a process's memory and descriptors, the bulkhead settings of a connection, and the
check that every call was settled on its first answer with none reconciled.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import text

from bench.harness import VERSION, Target, _json_headers, mercato
from bench.lean_provider import SLEEPING_PATH
from bench.load import RequestFactory

PROVIDER_BUSY = "PROVIDER_BUSY"


def invoke_path(service: str) -> str:
    return f"/v1/services/{service}/versions/{VERSION}:invoke"


def sleeping_factory(target: Target, service: str, tag: str, sleep: float) -> RequestFactory:
    """Invokes of `service`, each with a fresh Idempotency-Key, asking its provider to answer
    `sleep` seconds later (0: at once)."""
    api_key, path = target.seeded.api_key, invoke_path(service)
    member = b',"sleep":%s' % repr(float(sleep)).encode() if sleep else b""

    def make(client: int, n: int) -> tuple[str, str, dict[str, str], bytes]:
        key = f"bench-{target.run_id}-{tag}-{client}-{n}"
        body = b'{"job":"bench","n":%d%s}' % (n, member)
        return "POST", path, _json_headers(api_key, key), body

    return make


@dataclass
class Tally:
    """Answers by HTTP status and, for problem answers, by `status code` (e.g. `503
    PROVIDER_BUSY`); whether each refusal with a `Retry-After`-style body carried `retryAfter`.
    Thread-safe: a flood and a measured load may count from two threads."""

    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    busy_without_retry_after: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, status: int, body: bytes) -> None:
        code = ""
        retry_after = True
        if status >= 400:
            try:
                problem = orjson.loads(body)
            except orjson.JSONDecodeError:
                problem = None
            if isinstance(problem, dict):
                code = str(problem.get("code", ""))
                retry_after = isinstance(problem.get("retryAfter"), int | float)
        with self.lock:
            self.statuses[status] += 1
            if status >= 400:
                self.codes[f"{status} {code or '-'}"] += 1
                if code == PROVIDER_BUSY and not retry_after:
                    self.busy_without_retry_after += 1

    @property
    def busy(self) -> int:
        return sum(n for name, n in self.codes.items() if name.endswith(f" {PROVIDER_BUSY}"))

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "problem_codes": dict(sorted(self.codes.items())),
                "provider_busy": self.busy,
                "provider_busy_without_retryAfter": self.busy_without_retry_after,
            }


def raise_nofile() -> dict[str, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (the processes it starts
    inherit it); the limits before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft_before": soft, "soft": now, "hard": hard}


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kernel_limits() -> dict[str, Any]:
    """The kernel settings that bound a burst of loopback connections."""
    ports = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low_high = [int(v) for v in ports.read_text().split()] if ports.exists() else [0, -1]
    return {
        "somaxconn": _read_int("/proc/sys/net/core/somaxconn"),
        "tcp_max_syn_backlog": _read_int("/proc/sys/net/ipv4/tcp_max_syn_backlog"),
        "ephemeral_ports": low_high[1] - low_high[0] + 1,
        "file_max": _read_int("/proc/sys/fs/file-max"),
    }


def status_kib(pid: int, name: str) -> int | None:
    """A `/proc/PID/status` figure in KiB (`VmRSS`, `VmHWM`), None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None


def nofile_of(pid: int) -> int | None:
    """The soft `Max open files` of a running process."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Sampler:
    """Samples a process's resident memory (VmRSS) and open descriptors every `every` seconds
    in a thread, keeping the peaks, until stopped; waiting on an event, not sleeping blind.
    With `live_url`, each sample also times one `GET /health/live` of the server (a fresh
    connection each time): how long the server's event loop kept a trivial request waiting."""

    def __init__(self, pid: int, every: float = 0.25, live_url: str | None = None) -> None:
        self.pid = pid
        self.every = every
        self.live_url = live_url
        self.peak_rss_kib = 0
        self.peak_fds = 0
        self.samples = 0
        self.live_ms: list[float] = []
        self.live_failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        rss, fds = status_kib(self.pid, "VmRSS"), open_fds(self.pid)
        self.samples += 1
        self.peak_rss_kib = max(self.peak_rss_kib, rss or 0)
        self.peak_fds = max(self.peak_fds, fds or 0)
        if self.live_url is not None:
            began = time.perf_counter()
            try:
                httpx.get(self.live_url + "/health/live", timeout=60).raise_for_status()
            except httpx.HTTPError:
                self.live_failures += 1
            else:
                self.live_ms.append((time.perf_counter() - began) * 1000)

    def live_summary(self) -> dict[str, Any]:
        """The `/health/live` probes: how many, their median and slowest, and failures."""
        ordered = sorted(self.live_ms)
        return {
            "probes": len(ordered),
            "p50_ms": round(ordered[len(ordered) // 2], 1) if ordered else None,
            "max_ms": round(ordered[-1], 1) if ordered else None,
            "failures": self.live_failures,
        }

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def reset(self) -> None:
        self.peak_rss_kib = self.peak_fds = 0
        self.sample()


def sleeping(provider_url: str, *, reset: bool = False) -> dict[str, int]:
    """The lean provider's count of calls asleep now, its peak, and its answers after a sleep."""
    params = {"reset": "1"} if reset else {}
    response = httpx.get(provider_url + SLEEPING_PATH, params=params, timeout=10)
    response.raise_for_status()
    shown: dict[str, int] = response.json()
    return shown


def connection_id(runtime: Any, service: str) -> str:
    """The id of the connection `bench.harness.seed` made for `service` (named after it)."""
    with runtime.db.read() as session:
        found = session.scalar(
            text("SELECT id FROM provider_connections WHERE name = :name"),
            {"name": service.replace(".", "-")},
        )
    if found is None:
        raise RuntimeError(f"no connection for {service}")
    return str(found)


def set_max_in_flight(env: dict[str, str], connection: str, calls: int) -> dict[str, Any]:
    """`mercato admin update-connection ID --max-in-flight N` (DESIGN §7); its exit status and
    last line, so a tree without bulkheads says so in the result instead of failing the run."""
    done = mercato("admin", "update-connection", connection, "--max-in-flight", str(calls), env=env)
    said = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return {"max_in_flight": calls, "exit": done.returncode, "said": said[-1] if said else ""}


def provider_calls(log: Path, offset: int = 0) -> tuple[dict[str, Any], int]:
    """serve's `provider call` log lines (JSON, one per call: its transport error and elapsed
    time, never a secret) from byte `offset` of its log on: executions by error, their elapsed
    time, and over how many seconds serve started them (each line's time, written when the call
    ended, less its elapsed time); and the log's length, the next offset."""
    errors: Counter[str] = Counter()
    elapsed: list[float] = []
    starts: list[float] = []
    with log.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    for raw in data.splitlines():
        if b'"provider call"' not in raw:
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if line.get("operation") != "execute":
            continue
        errors[str(line.get("provider_error") or "none")] += 1
        took = float(line.get("elapsed_ms") or 0.0)
        elapsed.append(took)
        with contextlib.suppress(KeyError, TypeError, ValueError):
            starts.append(dt.datetime.fromisoformat(line["ts"]).timestamp() - took / 1000)
    elapsed.sort()
    return {
        "calls": len(elapsed),
        "by_error": dict(sorted(errors.items())),
        "elapsed_ms_p50": round(elapsed[len(elapsed) // 2], 1) if elapsed else None,
        "elapsed_ms_max": round(elapsed[-1], 1) if elapsed else None,
        "started_over_s": round(max(starts) - min(starts), 3) if starts else None,
    }, offset + len(data)


def first_answers(runtime: Any, key_prefix: str = "") -> dict[str, Any]:
    """Whether every call was settled on its first answer: per invocation its attempts (sends)
    and reconciliations; over the calls whose Idempotency-Key starts with `key_prefix` (every
    call of the store by default)."""
    with runtime.db.read() as session:
        row = session.execute(
            text(
                "SELECT count(*), "
                "coalesce(sum(CASE WHEN i.reconciliations > 0 THEN 1 ELSE 0 END), 0), "
                "coalesce(sum(CASE WHEN (SELECT count(*) FROM invocation_attempts a "
                "WHERE a.invocation_id = i.id) <> 1 THEN 1 ELSE 0 END), 0), "
                "coalesce(sum(CASE WHEN i.state = 'SUCCEEDED' AND i.settlement = 'SETTLED' "
                "THEN 1 ELSE 0 END), 0), "
                "coalesce(sum(CASE WHEN i.state = 'SUCCEEDED' AND i.settlement = 'SETTLED' "
                "AND i.reconciliations = 0 AND (SELECT count(*) FROM invocation_attempts a "
                "WHERE a.invocation_id = i.id) = 1 THEN 1 ELSE 0 END), 0) "
                "FROM invocations i WHERE i.idempotency_key LIKE :prefix"
            ),
            {"prefix": key_prefix + "%"},  # the bench's keys hold no `%` or `_`
        ).one()
    calls, reconciled, resent, settled, first = (int(v) for v in row)
    return {
        "invocations": calls,
        "reconciled": reconciled,
        "not_one_attempt": resent,
        "succeeded_settled": settled,
        "settled_on_first_answer": first,
        "all_settled_on_first_answer": calls == first,
    }
