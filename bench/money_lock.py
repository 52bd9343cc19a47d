"""Who holds PostgreSQL's money lock, and doing what, while a load runs (decision 0440).

Samples `pg_stat_activity` and `pg_locks` of one database every few milliseconds on one
connection and prints the share of samples in which the money lock (`guarded.MONEY_LOCK`) was
held exclusively (by a group commit) by a backend in each state: executing (`active -:-`),
flushing its commit (`active IO:WALSync`), waiting for its client inside the transaction
(`idle in transaction Client:ClientRead`: serial time nobody uses), or not held at all
(`nobody`). Run it beside a load on a benchmark database (e.g. the `mercato_bench_*` database
of a running `bench.harness` stack); it opens one connection.

    python -m bench.money_lock DATABASE [--seconds 5] [--admin postgresql://...]
"""

from __future__ import annotations

import argparse
import collections
import time

import psycopg

from bench.harness import DEFAULT_PG_ADMIN
from mercato.db.guarded import MONEY_LOCK

_QUERY = """
SELECT a.state, coalesce(a.wait_event_type, '-') || ':' || coalesce(a.wait_event, '-')
FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
WHERE a.datname = %s AND l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
  AND ((l.classid::bigint << 32) | l.objid::bigint) = %s
"""


def sample(database: str, seconds: float, admin: str) -> tuple[int, collections.Counter[str]]:
    """(samples, how many found the exclusive holder in each state)."""
    held: collections.Counter[str] = collections.Counter()
    samples = 0
    with psycopg.connect(admin, autocommit=True) as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rows = conn.execute(_QUERY, (database, MONEY_LOCK)).fetchall()
            samples += 1
            held[" ".join(rows[0]) if rows else "nobody"] += 1
            time.sleep(0.003)
    return samples, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--admin", default=DEFAULT_PG_ADMIN)
    args = parser.parse_args()
    samples, held = sample(args.database, args.seconds, args.admin)
    print(f"{samples} samples of {args.database}'s money lock (held exclusively by):")
    for state, count in held.most_common():
        print(f"  {count / samples:6.1%}  {state}")


if __name__ == "__main__":
    main()
