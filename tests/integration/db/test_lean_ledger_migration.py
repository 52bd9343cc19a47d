"""Migration 0022 (decision 0595) converts a store with every kind of movement, on both stores:
grants, settles, releases, a refund, a refund that is blocked (the provider's earnings paid out),
a staff resolution, a call still pending. Balances, the ledger's lines and `verify-ledger` are the
same after it as before; new calls settle and fold on the converted store; the downgrade gives
back the same balances and lines."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, select, text

from mercato.core.clock import utcnow
from mercato.db.engine import make_engine
from mercato.db.migrate import alembic_config, upgrade
from mercato.ledger import service as ledger
from mercato.ledger.lines import lines
from mercato.ledger.schemas import PLATFORM
from mercato.ledger.service import fold

BEFORE = "0021_key_spend_limits"
T0 = dt.datetime(2026, 12, 1, 10, 0, 0)
C1, C2, P = "acc_caller1", "acc_caller2", "acc_provider"
ROOT = Path(__file__).parents[3]


@pytest.fixture(autouse=True)
def _bench_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench.old_ledger` writes and reads the ledger as it was before 0022."""
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it


def _populate(engine: Engine) -> None:
    from bench.old_ledger import OldLedger

    with engine.begin() as conn:
        for n, account in enumerate((C1, C2, P)):
            conn.execute(
                text("INSERT INTO accounts VALUES (:i, :e, NULL, false, :t)"),
                {"i": account, "e": f"{account}@example.com", "t": T0 + dt.timedelta(hours=n)},
            )
        old = OldLedger(conn, provider=P, t0=T0)
        old.post("grant", None, "welcome", (PLATFORM, "issuance", -100), (C1, "available", 100))
        old.post("grant", None, "welcome", (PLATFORM, "issuance", -50), (C2, "available", 50))
        old.reserve("res_a", C1, 10)  # settled: 7 + 3
        old.settle("res_a", C1, 10, 7000)
        old.reserve("res_b", C1, 5)  # released (the provider failed)
        old.release("res_b", C1, 5)
        old.reserve("res_c", C2, 8)  # settled 4 + 4, then refunded (an approved dispute)
        old.settle("res_c", C2, 8, 5000)
        old.refund("res_c", C2, 8, 4)
        old.reserve("res_d", C2, 6)  # settled 6 + 0; its refund is blocked by the payout
        old.settle("res_d", C2, 6, 10_000)
        old.post("payout", None, "paid", (P, "earnings", -9), (PLATFORM, "issuance", 9))
        old.reserve("res_e", C2, 3)  # resolved by staff as failed
        old.release("res_e", C2, 3)
        old.reserve("res_f", C1, 7)  # resolved by staff as succeeded, 0 % to the provider
        old.settle("res_f", C1, 7, 0)
        old.reserve("res_g", C1, 4)  # still pending
        old.reserve("res_h", C1, 1)  # settled 1 + 0 (a share rounded down to nothing)
        old.settle("res_h", C1, 1, 3333)


def _balances(engine: Engine) -> dict[tuple[str, str], int]:
    from bench.old_ledger import cached_balances

    with engine.connect() as conn:
        return cached_balances(conn)


def _old_lines(engine: Engine) -> Counter[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT t.kind, t.reference, t.memo, a.owner, a.kind, e.amount "
                "FROM ledger_entries e JOIN ledger_transfers t ON t.id = e.transfer_id "
                "JOIN ledger_accounts a ON a.id = e.ledger_account_id"
            )
        ).all()
    return Counter(tuple(row) for row in rows)


def _new_lines(engine: Engine) -> Counter[tuple[Any, ...]]:
    line = lines()
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                line.c.transfer_kind,
                line.c.reference,
                line.c.memo,
                line.c.owner,
                line.c.account_kind,
                line.c.amount,
            )
        ).all()
    return Counter(tuple(row) for row in rows)


def _exact(engine: Engine) -> dict[tuple[str, str], int]:
    """Every balance as the ledger reads it (exact), zeros left out."""
    with engine.connect() as conn:
        from sqlalchemy.orm import Session

        session = Session(bind=conn)
        found: dict[tuple[str, str], int] = {}
        for owner in (C1, C2, P):
            b = ledger.balances(session, account_id=owner)
            found |= {(owner, "available"): b.available, (owner, "reserved"): b.reserved}
            found[(owner, "earnings")] = b.earnings
        platform = ledger.platform_balances(session)
        found[(PLATFORM, "revenue")] = platform["revenue"]
        found[(PLATFORM, "issuance")] = platform["issuance"]
        report = ledger.verify(session).as_dict()
        session.close()
    return {key: value for key, value in found.items() if value} | {("report", ""): report}  # type: ignore[dict-item]


def _converts(engine: Engine) -> None:
    upgrade(engine, BEFORE)
    _populate(engine)
    balances, old_lines = _balances(engine), _old_lines(engine)
    assert balances[(C1, "reserved")] == 4 and balances[(P, "earnings")] == 4

    upgrade(engine)
    after = _exact(engine)
    report = after.pop(("report", ""))
    assert after == balances
    assert report["balanced"], report["problems"]
    assert (report["issued"], report["reserved"], report["earnings"]) == (141, 4, 4)
    assert _new_lines(engine) == old_lines
    with engine.connect() as conn:
        left = conn.execute(text("SELECT DISTINCT kind FROM ledger_transfers")).scalars()
        assert set(left) == {"grant", "refund", "payout"}

    # The converted store takes new calls: one settled and folded, one settled and not.
    from sqlalchemy.orm import Session

    with Session(engine) as session, session.begin():
        for rid in ("res_x", "res_y"):
            ledger.reserve(
                session,
                account_id=C2,
                amount=2,
                reference=f"inv_{rid}",
                now=utcnow(),
                reservation_id=rid,
            )
            ledger.settle(
                session,
                reservation_id=rid,
                provider_account_id=P,
                provider_share_bps=5000,
                now=utcnow(),
            )
            if rid == "res_x":
                assert fold(session) == 1
    with Session(engine) as session:
        assert ledger.balances(session, account_id=P).earnings == 4 + 1 + 1
        assert ledger.verify(session).balanced

    command.downgrade(alembic_config(engine), BEFORE)
    balances[(C2, "available")] -= 4
    balances[(P, "earnings")] += 2
    balances[(PLATFORM, "revenue")] += 2
    assert _balances(engine) == balances
    for rid in ("res_x", "res_y"):
        memo = f"inv_{rid}"
        old_lines += Counter(
            [
                ("reserve", rid, memo, C2, "available", -2),
                ("reserve", rid, memo, C2, "reserved", 2),
                ("settle", rid, memo, C2, "reserved", -2),
                ("settle", rid, memo, P, "earnings", 1),
                ("settle", rid, memo, PLATFORM, "revenue", 1),
            ]
        )
    assert _old_lines(engine) == old_lines


def _fresh_postgres() -> Iterator[Engine]:
    admin_url = os.environ.get(
        "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    name = f"mercato_lean_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = make_engine(f"{admin_url.rsplit('/', 1)[0]}/{name}")
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.sqlite_only
def test_sqlite_store_converts_with_every_movement(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'mercato.db'}")
    try:
        _converts(engine)
    finally:
        engine.dispose()


@pytest.mark.postgres_only
def test_postgres_store_converts_with_every_movement(postgres_template: object) -> None:
    if postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    for engine in _fresh_postgres():
        _converts(engine)
