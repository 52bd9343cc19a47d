"""`mercato admin grant-points` and `verify-ledger` as real processes, on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from mercato.accounts.models import Account
from mercato.core.clock import utcnow
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.ledger import service

pytestmark = pytest.mark.functional


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    # SQLite starts from an empty file so `migrate` builds the schema; PostgreSQL is already
    # migrated by the fixture, so `migrate` must be harmless there.
    url = f"sqlite:///{tmp_path / 'cli.db'}" if db_url.startswith("sqlite") else db_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(MERCATO_ENV="dev", MERCATO_DATA_DIR=str(tmp_path / "var"), MERCATO_DATABASE_URL=url)
    migrated = _run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    return env


def _database(env: dict[str, str]) -> Database:
    return Database(make_engine(env["MERCATO_DATABASE_URL"]))


def _add_account(db: Database, email: str) -> str:
    with db.transaction() as session:
        session.add(
            Account(
                id="acc_cli_ledger",
                email=email,
                password_hash=None,
                is_staff=False,
                created_at=utcnow(),
            )
        )
    return "acc_cli_ledger"


def test_grant_points_then_verify_then_tamper(cli_env: dict[str, str]) -> None:
    db = _database(cli_env)
    try:
        account_id = _add_account(db, "payer@example.com")

        granted = _run(cli_env, "admin", "grant-points", "payer@example.com", "100")
        assert granted.returncode == 0, granted.stderr
        with db.read() as session:
            assert service.balances(session, account_id=account_id).available == 100

        verified = _run(cli_env, "admin", "verify-ledger", "--json")
        assert verified.returncode == 0, verified.stderr
        report = json.loads(verified.stdout)
        assert report["balanced"] is True
        assert report["problems"] == []
        assert (report["issued"], report["available"], report["reserved"]) == (100, 100, 0)

        with db.transaction() as session:
            session.execute(
                text("UPDATE ledger_accounts SET balance = balance + 5 WHERE owner = :owner"),
                {"owner": account_id},
            )
        tampered = _run(cli_env, "admin", "verify-ledger", "--json")
        assert tampered.returncode != 0
        report = json.loads(tampered.stdout)
        assert report["balanced"] is False
        assert any(
            "caches 105 but its entries and reservations sum to 100" in p
            for p in report["problems"]
        )
    finally:
        db.dispose()


def test_grant_points_refuses_unknown_emails_and_bad_amounts(cli_env: dict[str, str]) -> None:
    unknown = _run(cli_env, "admin", "grant-points", "nobody@example.com", "10")
    assert unknown.returncode == 2
    assert unknown.stderr == "error: argument EMAIL: Account not found (ACCOUNT_NOT_FOUND)\n"
    for points in ("0", "ten", str(10**16)):
        refused = _run(cli_env, "admin", "grant-points", "nobody@example.com", points)
        assert refused.returncode == 2
        assert refused.stderr.startswith("error: argument N: ")
        assert len(refused.stderr.splitlines()) == 1
    verified = _run(cli_env, "admin", "verify-ledger")
    assert verified.returncode == 0, verified.stdout
    assert "balanced: true" in verified.stdout
