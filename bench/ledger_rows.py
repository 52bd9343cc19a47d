"""Row writes and WAL bytes per settled invoke on PostgreSQL (issue 43, decision 0595).

One fresh database, migrated and seeded as the benchmark seeds it, with the lean provider;
`mercato serve` started and warmed; then a CHECKPOINT, the counters read, `--seconds` of load
with `--clients` closed-loop clients (every call a fresh Idempotency-Key, every answer a 200),
serve stopped (its backends exit, so their statistics are flushed), the ledger folded (every
credit of the window: `mercato.ledger.service.fold`, when the tree has one), and the counters
read again. Reported per settled invoke: row writes (inserts + updates + deletes over every
user table, `pg_stat_user_tables`), of them inserts and updates per table, and WAL bytes
(`pg_current_wal_lsn()` deltas; the window starts right after the CHECKPOINT, so it holds the
full-page images a real run pays too). Run it on another tree with PYTHONPATH pointing there
(`PYTHONPATH=/path/src:/path python -m bench.ledger_rows`): migration, seeding, serve and fold
are then all that tree's.

    python -m bench.ledger_rows [--clients 16] [--seconds 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench.harness import DEFAULT_PG_ADMIN, HOST, _live, free_port, wait_until
from bench.instructions import fresh_factories, seeded_store
from bench.load import run_load

_COUNTERS = text(
    "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables"
)


def _counters(url: str) -> tuple[dict[str, tuple[int, int, int, int]], str]:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            tables = {row[0]: tuple(int(v) for v in row[1:]) for row in conn.execute(_COUNTERS)}
            lsn = str(conn.execute(text("SELECT pg_current_wal_lsn()")).scalar())
        return tables, lsn  # type: ignore[return-value]
    finally:
        engine.dispose()


def _wal(url: str, start: str, end: str, invokes: int) -> dict[str, Any]:
    """WAL bytes of the window, and by record kind (`pg_walinspect`, PostgreSQL 15+): record
    bytes and full-page-image bytes per invoke, the largest kinds first."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            total = int(
                conn.execute(  # type: ignore[arg-type]
                    text("SELECT CAST(:end AS pg_lsn) - CAST(:start AS pg_lsn)"),
                    {"start": start, "end": end},
                ).scalar()
            )
            try:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
                stats = conn.execute(
                    text(
                        'SELECT "resource_manager/record_type", count, record_size, fpi_size '
                        "FROM pg_get_wal_stats(CAST(:start AS pg_lsn), CAST(:end AS pg_lsn), "
                        "true) WHERE count > 0 ORDER BY record_size + fpi_size DESC LIMIT 12"
                    ),
                    {"start": start, "end": end},
                ).all()
            except Exception:  # no pg_walinspect: the total alone
                stats = []
        kinds = {
            row[0]: {
                "records": round(row[1] / invokes, 2),
                "bytes": round(row[2] / invokes),
                "fpi_bytes": round(row[3] / invokes),
            }
            for row in stats
        }
        return {"wal_bytes_per_invoke": round(total / invokes), "wal_by_kind": kinds}
    finally:
        engine.dispose()


def _checkpoint(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("CHECKPOINT"))
    finally:
        engine.dispose()


def _fold(url: str, env: dict[str, str]) -> int:
    """Fold every credit, with the tree's own code; -1 when the tree has no fold."""
    code = (
        "import sys\n"
        "from mercato.db.engine import make_engine\n"
        "from sqlalchemy.orm import Session\n"
        "try:\n"
        "    from mercato.ledger.service import fold\n"
        "except ImportError:\n"
        "    print(-1); sys.exit(0)\n"
        "engine = make_engine(sys.argv[1])\n"
        "with Session(engine) as session, session.begin():\n"
        "    print(fold(session))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def _serving(args: list[str], env: dict[str, str], url: str, workdir: Path) -> Iterator[None]:
    """`mercato serve` running, stopped on the way out (its backends exit and so flush their
    table statistics: a live backend reports them up to 10 s late, which would count the warm-up's
    calls in the window's rows but not in its WAL)."""
    with (workdir / "serve.log").open("ab") as log:
        child = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: _live(url, child), "serve", timeout=120)
            yield
        finally:
            child.terminate()
            child.wait(60)


def measure(options: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with seeded_store("postgresql", workdir, options.pg_admin_url) as (env, runner, db_url):
        port = free_port()
        url = f"http://{HOST}:{port}"
        statuses: Counter[int] = Counter()
        args = [sys.executable, "-m", "mercato", "serve", "--port", str(port)]
        args += ["--workers", str(options.workers)]
        plain_url = db_url
        factories = fresh_factories(runner, f"rows-{port}")
        with _serving(args, env, url, workdir):  # warmed, then stopped: its statistics flushed
            run_load(url, next(factories), concurrency=options.clients, duration=2.0)
        _fold(plain_url, env)
        _checkpoint(plain_url)
        before, lsn_before = _counters(plain_url)
        with _serving(args, env, url, workdir):
            run_load(
                url,
                next(factories),
                concurrency=options.clients,
                duration=options.seconds,
                warmup=0.0,
                check=lambda status, _body: statuses.update([status]),
            )
        folded = _fold(plain_url, env)
        after, lsn_after = _counters(plain_url)
        wal = _wal(
            plain_url,
            lsn_before,
            lsn_after,
            max(after["invocations"][0] - before["invocations"][0], 1),
        )
    if set(statuses) != {200}:
        raise RuntimeError(f"answers {dict(statuses)}")
    delta = {
        name: tuple(a - b for a, b in zip(after[name], before.get(name, (0, 0, 0, 0)), strict=True))
        for name in after
    }
    invokes = delta["invocations"][0]
    per = {
        name: {"ins": round(d[0] / invokes, 2), "upd": round(d[1] / invokes, 2)}
        for name, d in sorted(delta.items())
        if d[0] or d[1] or d[2]
    }
    rows = sum(d[0] + d[1] + d[2] for d in delta.values())
    return {
        "invokes": invokes,
        "answered_200": statuses[200],
        "folded": folded,
        "rows_per_invoke": round(rows / invokes, 2),
        "per_table": per,
    } | wal


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_rows")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    options = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mercato-rows-"))
    try:
        print(json.dumps(measure(options, workdir), indent=1))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
