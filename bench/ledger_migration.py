"""Migration 0022 (the lean ledger, decision 0595) on a grown store: is everything the same after
it, how long does it take, and does its downgrade give the store back (issue 43)?

Per store: a fresh database (PostgreSQL: a scratch database; SQLite: a file in a temp dir)
migrated to `0021_key_spend_limits`, grown to `--invocations` calls written in bulk by set-based
SQL the way the ledger before 0022 wrote them (`bench.old_ledger`: every reserve, settle,
release, refund, grant and payout a transfer with its entries, every balance cached), then:

1. read as revision 0021 read it: every account's available, reserved and earnings and the
   platform's revenue and issuance (the cached balances), `verify-ledger` as 0021's checks ran
   it (`old_ledger.verify`), and digests of the receipts (each invocation's receipt as the
   product shows it), of the reservations' rows and of the ledger's lines;
2. `alembic upgrade 0022_lean_ledger`, timed;
3. read through the current code (`ledger.balances`, `ledger.platform_balances`: the exact
   earnings and revenue; `ledger.verify`; `mercato.ledger.lines`) and compared: `identical`
   when every figure and digest is the same and `verify-ledger` balanced;
4. `alembic downgrade 0021_key_spend_limits`, timed, and read as in 1 again.

The calls, across a few thousand callers and a few dozen providers (shares from 0 to 100 %),
by `i % 100`: 88 % settled, 7 % released (the provider failed), 2 % settled then refunded (an
approved dispute), 1 % resolved by staff as succeeded, 1 % as failed, 1 % still pending (HELD);
every caller granted points (a tenth of them twice), every provider with earnings paid a third
of them out. On PostgreSQL the growth runs with triggers and foreign-key checks off
(`session_replication_role = replica`, as the tests empty their template): its rows are
consistent by construction, and the old `verify-ledger` re-proves them before the upgrade.

    python -m bench.ledger_migration [--invocations 1000000] [--store postgresql|sqlite|both]
        [--pg-admin-url URL] [--no-downgrade]

Prints a JSON report; exits 1 unless every store came out identical and balanced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
from alembic import command
from sqlalchemy import Connection, Engine, Select, Table, select, text
from sqlalchemy.orm import Session

from bench import old_ledger
from bench.harness import DEFAULT_PG_ADMIN, database
from mercato.db.engine import make_engine
from mercato.db.migrate import alembic_config
from mercato.invocations.money import VIEW_COLUMNS
from mercato.invocations.schemas import view_of
from mercato.ledger import service as ledger
from mercato.ledger.lines import lines as lean_lines
from mercato.ledger.models import Reservation

BEFORE = "0021_key_spend_limits"
AFTER = "0022_lean_ledger"
TABLES = (
    "accounts",
    "invocations",
    "reservations",
    "ledger_accounts",
    "ledger_transfers",
    "ledger_entries",
)
T0 = "2026-01-01 00:00:00"
DAY = 86_400
Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- growth -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sql:
    """The few expressions the two stores write differently."""

    pg: bool

    def pad(self, number: str, width: int) -> str:
        if self.pg:
            return f"lpad(CAST({number} AS TEXT), {width}, '0')"
        return f"printf('%0{width}d', {number})"

    def at(self, seconds: str) -> str:
        """`T0` + `seconds`, as the store keeps a UTC time."""
        if self.pg:
            return f"(TIMESTAMPTZ '{T0}+00' + ({seconds}) * INTERVAL '1 second')"
        return f"(strftime('%Y-%m-%d %H:%M:%S', '{T0}', ({seconds}) || ' seconds') || '.000000')"

    def series(self, n: int) -> tuple[str, str]:
        """(a prefix, a FROM item): the numbers 1..n as `numbers(i)`."""
        if self.pg:
            return "", f"generate_series(1, {n}) AS numbers(i)"
        recursive = "SELECT 1 UNION ALL SELECT i + 1 FROM numbers WHERE i < "
        return f"WITH RECURSIVE numbers(i) AS ({recursive}{n}) ", "numbers"

    def json(self, value: str) -> str:
        return f"CAST('{value}' AS JSON)" if self.pg else f"'{value}'"

    def blob(self, value: str) -> str:
        return f"convert_to('{value}', 'UTF8')" if self.pg else f"CAST('{value}' AS BLOB)"


def _people(sql: _Sql, callers: int, providers: int) -> list[str]:
    statements = []
    for tag, count, width in (("c", callers, 5), ("p", providers, 3)):
        prefix, numbers = sql.series(count)
        number = sql.pad("i", width)
        statements.append(
            "INSERT INTO accounts (id, email, password_hash, is_staff, created_at) "  # noqa: S608 (constants)
            f"{prefix}SELECT 'acc_{tag}' || {number}, '{tag}' || {number} || '@bench.example', "
            f"NULL, false, {sql.at(f'i - 2 * {DAY}')} FROM {numbers}"
        )
    return statements


def _calls(sql: _Sql, n: int, callers: int, providers: int) -> list[str]:
    """The temporary table of the calls, then their reservations and invocations."""
    prefix, numbers = sql.series(n)
    outcome = (
        "CASE WHEN x.k = 0 THEN 'held' WHEN x.k <= 7 THEN 'released' WHEN x.k <= 9 "
        "THEN 'refunded' WHEN x.k = 10 THEN 'staff_ok' WHEN x.k = 11 THEN 'staff_fail' "
        "ELSE 'settled' END"
    )
    bps = (
        "CASE WHEN x.p % 10 = 1 THEN 10000 WHEN x.p % 10 = 2 THEN 0 ELSE 6000 + (x.p % 5) * 700 END"
    )
    calls = (
        f"CREATE TEMPORARY TABLE bench_calls AS {prefix}"  # noqa: S608 (constants)
        f"SELECT x.i, x.n, 'acc_c' || {sql.pad('x.c', 5)} AS caller, "
        f"'acc_p' || {sql.pad('x.p', 3)} AS provider, {sql.pad('x.p', 3)} AS pn, x.price, "
        f"{bps} AS bps, {outcome} AS outcome FROM (SELECT i, {sql.pad('i', 8)} AS n, "
        f"i % {callers} + 1 AS c, (i / 7) % {providers} + 1 AS p, 1 + (i * 37) % 53 AS price, "
        f"i % 100 AS k FROM {numbers}) AS x"
    )
    posted = "b.outcome IN ('settled', 'refunded', 'staff_ok')"
    staff = "b.outcome IN ('staff_ok', 'staff_fail')"
    share = "b.price * b.bps / 10000"
    reservations = (
        "INSERT INTO reservations (id, account_id, reference, amount, state, "  # noqa: S608 (constants)
        "provider_account_id, provider_amount, platform_amount, created_at, resolved_at, "
        "refunded_at) SELECT 'res_' || b.n, b.caller, 'inv_' || b.n, b.price, "
        "CASE WHEN b.outcome = 'held' THEN 'HELD' WHEN b.outcome = 'refunded' THEN 'REFUNDED' "
        f"WHEN {posted} THEN 'SETTLED' ELSE 'RELEASED' END, "
        f"CASE WHEN {posted} THEN b.provider END, CASE WHEN {posted} THEN {share} END, "
        f"CASE WHEN {posted} THEN b.price - {share} END, {sql.at('b.i')}, "
        f"CASE WHEN b.outcome = 'held' THEN NULL WHEN {staff} THEN {sql.at('b.i + 3600')} "
        f"ELSE {sql.at('b.i + 1')} END, "
        f"CASE WHEN b.outcome = 'refunded' THEN {sql.at(f'b.i + {DAY}')} END FROM bench_calls AS b"
    )
    succeeded = "b.outcome IN ('settled', 'refunded')"
    result = sql.blob('{"ok": true}')
    invocations = (
        "INSERT INTO invocations (id, account_id, idempotency_key, fingerprint, channel, "  # noqa: S608 (constants)
        "service_code, version, version_id, contract_digest, connection_id, "
        "provider_account_id, provider_share_bps, price, has_artifact_contract, "
        "response_max_bytes, result_schema, payload, provider_key, state, settlement, "
        "reservation_id, sends, reconciliations, next_attempt_at, error_code, "
        "provider_http_status, result, created_at, updated_at, settled_at, refunded_at, "
        "stuck_at, resolution_decision, resolution_reason, resolved_by, resolved_at) "
        "SELECT 'inv_' || b.n, b.caller, 'key-' || b.n, 'fp' || b.n, "
        "CASE WHEN b.i % 3 = 0 THEN 'SESSION' ELSE 'API' END, 'bench.migration-' || b.pn, "
        "'v1', 'ver_' || b.pn, 'digest-' || b.pn, 'pco_' || b.pn, b.provider, b.bps, "
        f"b.price, false, 65536, {sql.json('{}')}, {sql.blob('{}')}, 'mercato:inv_' || b.n, "
        "CASE WHEN b.outcome = 'held' AND b.i % 200 = 0 THEN 'RECONCILING' "
        "WHEN b.outcome = 'held' THEN 'DISPATCHING' "
        "WHEN b.outcome IN ('released', 'staff_fail') THEN 'FAILED' ELSE 'SUCCEEDED' END, "
        "CASE WHEN r.state = 'HELD' THEN 'PENDING' ELSE r.state END, r.id, 1, "
        f"CASE WHEN {staff} OR b.i % 200 = 0 THEN 3 ELSE 0 END, "
        f"CASE WHEN b.outcome = 'held' THEN {sql.at('b.i + 60')} END, "
        "CASE WHEN b.outcome = 'released' THEN 'PROVIDER_UNAVAILABLE' END, "
        f"CASE WHEN b.outcome = 'released' THEN 503 WHEN {succeeded} THEN 200 END, "
        f"CASE WHEN {succeeded} THEN {result} END, r.created_at, "
        "COALESCE(r.refunded_at, r.resolved_at, r.created_at), "
        f"CASE WHEN {posted} THEN r.resolved_at END, r.refunded_at, "
        f"CASE WHEN {staff} THEN {sql.at('b.i + 600')} END, "
        "CASE WHEN b.outcome = 'staff_ok' THEN 'SUCCEEDED' "
        "WHEN b.outcome = 'staff_fail' THEN 'FAILED' END, "
        f"CASE WHEN {staff} THEN 'checked with the provider' END, "
        f"CASE WHEN {staff} THEN 'staff@bench.example' END, "
        f"CASE WHEN {staff} THEN r.resolved_at END "
        "FROM bench_calls AS b JOIN reservations AS r ON r.id = 'res_' || b.n"
    )
    return [calls, reservations, invocations]


def _ledger_accounts() -> list[str]:
    sources = (
        "SELECT 'lac_a' || substr(id, 5), id, 'available', 0 FROM accounts "
        "WHERE substr(id, 1, 5) = 'acc_c'",
        "SELECT DISTINCT 'lac_r' || substr(account_id, 5), account_id, 'reserved', 0 "
        "FROM reservations",
        "SELECT DISTINCT 'lac_e' || substr(provider_account_id, 5), provider_account_id, "
        "'earnings', 0 FROM reservations WHERE provider_amount > 0",
        "SELECT 'lac_platform_revenue', 'platform', 'revenue', 0",
        "SELECT 'lac_platform_issuance', 'platform', 'issuance', 0",
    )
    return [f"INSERT INTO ledger_accounts (id, owner, kind, balance) {s}" for s in sources]


def _transfer(
    tag: str, kind: str, memo: str, at: str, source: str, legs: tuple[tuple[str, str, str], ...]
) -> list[str]:
    """One `kind` transfer per row of `source` (`x.id`: the id its own take their suffix from),
    with one entry per (tag, ledger account id, amount) leg."""
    transfer = f"'trf_{tag}' || substr(x.id, 5)"
    statements = [
        "INSERT INTO ledger_transfers (id, kind, reference, memo, created_at) "  # noqa: S608 (constants)
        f"SELECT {transfer}, '{kind}', NULL, '{memo}', {at} FROM {source}"
    ]
    for leg, account, amount in legs:
        statements.append(
            "INSERT INTO ledger_entries (id, transfer_id, ledger_account_id, amount) "  # noqa: S608 (constants)
            f"SELECT 'ent_{tag}{leg}' || substr(x.id, 5), {transfer}, {account}, {amount} "
            f"FROM {source}"
        )
    return statements


def _grants_and_payouts(sql: _Sql, n: int, callers: int) -> list[str]:
    grant = 60 * (n // callers + 1) + 1_000
    callers_only = "accounts AS x WHERE substr(x.id, 1, 5) = 'acc_c'"
    topped_up = f"{callers_only} AND CAST(substr(x.id, 6) AS INTEGER) % 10 = 0"
    issuance = "'lac_platform_issuance'"
    available = "'lac_a' || substr(x.id, 5)"
    payouts = (
        "CREATE TEMPORARY TABLE bench_payouts AS SELECT provider_account_id AS id, "
        "CAST(SUM(provider_amount) AS BIGINT) / 3 AS points FROM reservations "
        "WHERE state = 'SETTLED' GROUP BY provider_account_id "
        "HAVING CAST(SUM(provider_amount) AS BIGINT) / 3 > 0"
    )
    earnings = "'lac_e' || substr(x.id, 5)"
    return [
        *_transfer(
            "g",
            "grant",
            "welcome",
            sql.at(f"-{DAY}"),
            callers_only,
            (("i", issuance, f"-{grant}"), ("a", available, str(grant))),
        ),
        *_transfer(
            "t",
            "grant",
            "top-up",
            sql.at("-3600"),
            topped_up,
            (("i", issuance, f"-{grant // 2}"), ("a", available, str(grant // 2))),
        ),
        payouts,
        *_transfer(
            "p",
            "payout",
            "paid out",
            sql.at(f"{n} + {2 * DAY}"),
            "bench_payouts AS x",
            (("e", earnings, "-x.points"), ("i", issuance, "x.points")),
        ),
    ]


def grow(engine: Engine, n: int, callers: int, providers: int) -> dict[str, int]:
    """Write `n` calls and their ledger as revision 0021's code would have left them; return
    the calls by outcome."""
    sql = _Sql(engine.dialect.name == "postgresql")
    statements = [
        *_people(sql, callers, providers),
        *_calls(sql, n, callers, providers),
        *_ledger_accounts(),
        *[s for kind in old_ledger.MOVEMENTS for s in old_ledger.call_movements_sql(kind)],
        *_grants_and_payouts(sql, n, callers),
        old_ledger.CACHE_BALANCES,
    ]
    with engine.begin() as conn:
        if sql.pg:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
        for statement in statements:
            conn.execute(text(statement))
        outcomes = {
            str(outcome): int(count)
            for outcome, count in conn.execute(
                text("SELECT outcome, COUNT(*) FROM bench_calls GROUP BY outcome")
            ).tuples()
        }
        conn.execute(text("DROP TABLE bench_calls"))
        conn.execute(text("DROP TABLE bench_payouts"))
    _maintain(engine)
    return dict(sorted(outcomes.items()))


def _maintain(engine: Engine) -> None:
    """What a store that grew over time would have had: vacuumed and analyzed, checkpointed."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"VACUUM (ANALYZE) {', '.join(TABLES)}"))
            conn.execute(text("CHECKPOINT"))
        return
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    with engine.connect() as conn:  # outside a transaction (every `begin` is IMMEDIATE here)
        raw = cast(Any, conn.connection.driver_connection)
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# --- snapshots ----------------------------------------------------------------------------


def _canon(value: Any) -> Any:
    return value.astimezone(dt.UTC).isoformat() if isinstance(value, dt.datetime) else value


def _digest(conn: Connection, query: Select[Any], encode: Callable[[Any], bytes]) -> list[Any]:
    """[rows, digest]: the digest of the rows as a multiset (the sum of each row's 64-bit
    BLAKE2b, modulo 2^64), so that neither side needs an order."""
    count = total = 0
    for row in conn.execute(query.execution_options(yield_per=20_000)):
        count += 1
        total += int.from_bytes(hashlib.blake2b(encode(row), digest_size=8).digest(), "big")
    return [count, f"{total % 2**64:016x}"]


def _row(row: Any) -> bytes:
    return repr(tuple(_canon(value) for value in row)).encode()


def _receipt(row: Any) -> bytes:
    return orjson.dumps(view_of(row).receipt(), option=orjson.OPT_SORT_KEYS)


_RESERVATION_COLUMNS = [c for c in cast(Table, Reservation.__table__).c if c.name != "credit_seq"]


def _shared(conn: Connection) -> dict[str, Any]:
    """What both revisions read alike: the receipts and the reservations' rows (0022 only adds
    a column to them)."""
    return {
        "receipts": _digest(conn, select(*VIEW_COLUMNS), _receipt),
        "reservations": _digest(conn, select(*_RESERVATION_COLUMNS), _row),
    }


def _owners(conn: Connection) -> list[str]:
    return [str(owner) for owner in conn.execute(text("SELECT id FROM accounts ORDER BY id"))]


def snapshot_old(engine: Engine) -> dict[str, Any]:
    """The store as revision 0021 read it: cached balances, its `verify-ledger`, its lines."""
    with engine.connect() as conn:
        cached = old_ledger.cached_balances(conn)
        balances = {
            owner: [cached.get((owner, kind), 0) for kind in ("available", "reserved", "earnings")]
            for owner in _owners(conn)
        }
        return {
            "balances": balances,
            "platform": {k: cached.get(("platform", k), 0) for k in ("revenue", "issuance")},
            "verify": old_ledger.verify(conn).as_dict(),
            "lines": _digest(conn, old_ledger.lines(), _row),
            **_shared(conn),
        }


def snapshot_lean(engine: Engine) -> dict[str, Any]:
    """The store as the current code reads it (the lean ledger)."""
    with engine.connect() as conn:
        session = Session(bind=conn)
        balances = {}
        for owner in _owners(conn):
            b = ledger.balances(session, account_id=owner)
            balances[owner] = [b.available, b.reserved, b.earnings]
        line = lean_lines().c
        columns = (line.transfer_kind, line.reference, line.memo, line.owner, line.account_kind)
        result = {
            "balances": balances,
            "platform": ledger.platform_balances(session),
            "verify": ledger.verify(session).as_dict(),
            "lines": _digest(conn, select(*columns, line.amount, line.created_at), _row),
            **_shared(conn),
        }
        session.close()
        return result


def _rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table: int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())  # noqa: S608 (constants)
            for table in TABLES
        }


def _differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [key for key in before if before[key] != after.get(key)]


# --- the run ------------------------------------------------------------------------------


def _timed(action: Callable[[], Any]) -> tuple[Any, float]:
    began = time.monotonic()
    value = action()
    return value, round(time.monotonic() - began, 2)


def measure(
    engine: Engine,
    invocations: int,
    *,
    callers: int,
    providers: int,
    downgrade: bool = True,
    say: Say = _stderr,
) -> dict[str, Any]:
    """Grow the store of `engine` (empty) and migrate it; the report (see the module)."""
    store = engine.dialect.name
    config = alembic_config(engine)
    command.upgrade(config, BEFORE)
    say(f"[{store}] growing to {invocations:,} invocations")
    outcomes, grow_seconds = _timed(lambda: grow(engine, invocations, callers, providers))
    say(f"[{store}] grown in {grow_seconds:.1f}s; reading it as revision 0021")
    rows_before = _rows(engine)
    before, read_before = _timed(lambda: snapshot_old(engine))
    say(f"[{store}] read in {read_before:.1f}s; upgrading to {AFTER}")
    _, upgrade_seconds = _timed(lambda: command.upgrade(config, AFTER))
    say(f"[{store}] upgraded in {upgrade_seconds:.1f}s; reading it through the current code")
    after, read_after = _timed(lambda: snapshot_lean(engine))
    differences = _differences(before, after)
    report: dict[str, Any] = {
        "store": store,
        "invocations": invocations,
        "callers": callers,
        "providers": providers,
        "calls": outcomes,
        "rows_before": rows_before,
        "rows_after": _rows(engine),
        "grow_seconds": grow_seconds,
        "upgrade_seconds": upgrade_seconds,
        "read_seconds": {"before": read_before, "after": read_after},
        "identical": not differences,
        "differences": differences,
        "verify_balanced": bool(after["verify"]["balanced"]),
        "verify": {k: v for k, v in after["verify"].items() if k != "problems"},
        "problems": after["verify"]["problems"][:5],
        "digests": {key: after[key] for key in ("receipts", "reservations", "lines")},
    }
    if downgrade:
        say(f"[{store}] downgrading to {BEFORE}")
        _, downgrade_seconds = _timed(lambda: command.downgrade(config, BEFORE))
        again = snapshot_old(engine)
        report["downgrade_seconds"] = downgrade_seconds
        report["rows_after_downgrade"] = _rows(engine)
        report["downgrade_differences"] = _differences(before, again)
        report["identical_after_downgrade"] = not report["downgrade_differences"]
    say(f"[{store}] identical: {report['identical']}, balanced: {report['verify_balanced']}")
    return report


def default_people(invocations: int) -> tuple[int, int]:
    """(callers, providers): 3,000 and 40 at a million calls, fewer for a small run."""
    return min(3_000, max(10, invocations // 300)), min(40, max(3, invocations // 25_000))


def run(
    store: str,
    invocations: int,
    *,
    pg_admin_url: str = DEFAULT_PG_ADMIN,
    downgrade: bool = True,
    say: Say = _stderr,
) -> dict[str, Any]:
    """`measure` on a fresh database of `store`, dropped afterwards."""
    callers, providers = default_people(invocations)
    with (
        tempfile.TemporaryDirectory(prefix="mercato-ledger-migration-") as workdir,
        database(store, Path(workdir), pg_admin_url) as url,
    ):
        engine = make_engine(url)
        try:
            return measure(
                engine,
                invocations,
                callers=callers,
                providers=providers,
                downgrade=downgrade,
                say=say,
            )
        finally:
            engine.dispose()


def passed(report: dict[str, Any]) -> bool:
    return bool(
        report["identical"]
        and report["verify_balanced"]
        and report.get("identical_after_downgrade", True)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_migration", description=__doc__)
    parser.add_argument("--invocations", type=int, default=1_000_000)
    parser.add_argument("--store", choices=("postgresql", "sqlite", "both"), default="both")
    parser.add_argument("--pg-admin-url", default=DEFAULT_PG_ADMIN)
    parser.add_argument("--no-downgrade", action="store_true")
    args = parser.parse_args(argv)
    stores = ("postgresql", "sqlite") if args.store == "both" else (args.store,)
    reports = {
        store: run(
            store,
            args.invocations,
            pg_admin_url=args.pg_admin_url,
            downgrade=not args.no_downgrade,
        )
        for store in stores
    }
    print(json.dumps({"stores": reports}, indent=2))
    return 0 if all(passed(report) for report in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
