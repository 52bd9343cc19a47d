"""Client CPU per database operation: the async drivers of `mercato.db.aio` against SQLAlchemy's
sync sessions and SQLAlchemy's async engine (decision 0320).

Two operations, each its own unit of work, run one after another (no concurrency: the figure is
the client's cost of one operation, not throughput):

- read: one row by key (a ledger account's balance by owner and kind), in a read unit;
- money: a guarded money program (`ledger._RESERVE`, one point), in a statement unit.

    python -m bench.db_drivers [--n 2000] [--stores sqlite,postgresql]

PostgreSQL: a scratch database is created on MERCATO_BENCH_POSTGRES_URL (default the local
server, user postgres) and dropped at the end. CPU is this process's (time.process_time):
the server's is not in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, create_engine, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from mercato.accounts import service as accounts
from mercato.core.clock import utcnow
from mercato.db import guarded, models, runner
from mercato.db.aio import make_async_database
from mercato.db.engine import make_engine
from mercato.db.migrate import upgrade
from mercato.db.plans import Rows, Run
from mercato.db.uow import Database
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerAccount

models.load_all()

ADMIN_URL = os.environ.get(
    "MERCATO_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
_AVAILABLE = select(LedgerAccount.balance).where(
    LedgerAccount.owner == bindparam("owner"), LedgerAccount.kind == "available"
)


def _measure(n: int, run: Callable[[int], None]) -> tuple[float, float]:
    run(-1)  # warm: compile, connect
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        run(i)
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def _measure_async(n: int, run: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        await run(-1)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            await run(i)
        return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6

    return asyncio.run(main())


def _reserve_params(account: str, tag: str, i: int) -> dict[str, Any]:
    ref = f"{tag}-{i}-{uuid.uuid4().hex[:8]}"
    return {
        "reservation_id": f"res_{ref}",
        "account_id": account,
        "amount": 1,
        "reference": ref,
        "now": utcnow(),
    }


def bench_store(url: str, async_url: str | None, n: int) -> list[tuple[str, str, float, float]]:
    engine = make_engine(url)
    db = Database(engine)
    with db.transaction() as session:
        account = accounts.create_account(
            session, email="bench@example.com", password=None, is_staff=False, now=utcnow()
        ).id
        ledger.grant(session, account_id=account, amount=10**9, now=utcnow(), memo="bench")
    results: list[tuple[str, str, float, float]] = []
    read_params = {"owner": account}

    def sync_read(_i: int) -> None:
        with db.read() as session:
            session.execute(_AVAILABLE, read_params).one()

    def sync_money(i: int) -> None:
        with db.statement() as session:
            assert (
                runner.run(session, ledger._RESERVE, _reserve_params(account, "s", i)) is not None
            )

    results.append(("SQLAlchemy sync Session", "read", *_measure(n, sync_read)))
    results.append(("SQLAlchemy sync Session", "money", *_measure(n, sync_money)))

    adb = make_async_database(db)

    async def driver_read(_i: int) -> None:
        async with adb.read() as conn:
            assert await conn.execute(Rows(_AVAILABLE, read_params))

    async def driver_money(i: int) -> None:
        async with adb.statement() as conn:
            assert (
                await conn.execute(Run(ledger._RESERVE, _reserve_params(account, "a", i)))
                is not None
            )

    async def both_driver(fn: Callable[[int], Awaitable[None]], i: int) -> None:
        await fn(i)

    label = "mercato.db.aio (" + ("asyncpg" if adb.dialect == "postgresql" else "sqlite3") + ")"
    results.append((label, "read", *_measure_async(n, driver_read)))
    results.append((label, "money", *_measure_async(n, driver_money)))

    if async_url is not None:
        aengine = create_async_engine(async_url)
        is_pg = adb.dialect == "postgresql"
        built = guarded.compiled(ledger._RESERVE, "postgresql") if is_pg else None

        async def sa_read(_i: int) -> None:
            async with aengine.connect() as conn:
                (await conn.execute(_AVAILABLE, read_params)).one()

        async def sa_money(i: int) -> None:
            assert built is not None and built.statement is not None
            values = {f"p_{k}": v for k, v in _reserve_params(account, "e", i).items()}
            values["p_transfer_id"] = f"trf_{uuid.uuid4().hex}"
            for name, prefix in built.fresh:
                values.setdefault(name, f"{prefix}_{uuid.uuid4().hex}")
            async with aengine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                (await auto.execute(built.statement, values)).one()

        async def run_engine() -> tuple[tuple[float, float], tuple[float, float] | None]:
            async def timed(fn: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
                await fn(-1)
                cpu, wall = time.process_time(), time.perf_counter()
                for i in range(n):
                    await fn(i)
                return (
                    (time.process_time() - cpu) / n * 1e6,
                    (time.perf_counter() - wall) / n * 1e6,
                )

            read = await timed(sa_read)
            money = await timed(sa_money) if is_pg else None
            await aengine.dispose()
            return read, money

        read, money = asyncio.run(run_engine())
        name = "SQLAlchemy async engine (" + async_url.split(":")[0] + ")"
        results.append((name, "read", *read))
        if money is not None:
            results.append((name, "money", *money))
    engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--stores", default="sqlite,postgresql")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, float, float]] = []
    stores = args.stores.split(",")
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "bench.db"
            engine = make_engine(f"sqlite:///{path}")
            upgrade(engine)
            engine.dispose()
            try:
                import aiosqlite  # noqa: F401

                async_url: str | None = f"sqlite+aiosqlite:///{path}"
            except ImportError:
                async_url = None
            for row in bench_store(f"sqlite:///{path}", async_url, args.n):
                rows.append(("sqlite", *row))
    if "postgresql" in stores:
        name = f"mercato_bench_{uuid.uuid4().hex[:10]}"
        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        try:
            engine = make_engine(url)
            upgrade(engine)
            engine.dispose()
            async_url = url.replace("+psycopg", "+asyncpg", 1)
            for row in bench_store(url, async_url, args.n):
                rows.append(("postgresql", *row))
        finally:
            with admin.connect() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": name},
                )
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            admin.dispose()
    print(f"{'store':<11} {'client':<44} {'op':<6} {'CPU µs/op':>10} {'wall µs/op':>11}")
    for store, client, op, cpu, wall in rows:
        print(f"{store:<11} {client:<44} {op:<6} {cpu:>10.0f} {wall:>11.0f}")


if __name__ == "__main__":
    main()
