"""The operator CLI for accounts and API keys, as real processes against a fresh SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from mercato.accounts import service
from mercato.accounts.models import Account, ApiKey
from mercato.core.clock import utcnow
from mercato.core.errors import Unauthenticated
from mercato.db.engine import make_engine
from mercato.db.uow import Database

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
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(
        MERCATO_ENV="dev",
        MERCATO_DATA_DIR=str(tmp_path / "var"),
        MERCATO_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.db'}",
    )
    migrated = _run(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    return env


def _db(env: dict[str, str]) -> Database:
    return Database(make_engine(env["MERCATO_DATABASE_URL"]))


def test_create_account_key_and_revoke(cli_env: dict[str, str]) -> None:
    created = _run(
        cli_env,
        "admin",
        "create-account",
        "Ops@Example.com",
        "--password",
        "s3cret-pass",
        "--staff",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    account = json.loads(created.stdout)
    assert account["email"] == "ops@example.com" and account["isStaff"] is True
    assert account["accountId"].startswith("acct_")

    key = _run(cli_env, "admin", "create-api-key", "ops@example.com", "--json")
    assert key.returncode == 0, key.stderr
    issued = json.loads(key.stdout)
    assert set(issued) == {"apiKey", "keyId"}
    assert issued["apiKey"].startswith("mercato_live_")

    db = _db(cli_env)
    try:
        with db.read() as session:
            row = session.scalars(select(ApiKey)).one()
            assert row.digest == service.token_digest(issued["apiKey"])
            stored = session.scalars(select(Account)).one()
            assert stored.password_hash is not None
            assert service.verify_password(stored.password_hash, "s3cret-pass")
        with db.transaction() as session:
            principal = service.resolve_api_key(session, api_key=issued["apiKey"], now=utcnow())
            assert principal.account_id == account["accountId"]

        revoked = _run(cli_env, "admin", "revoke-api-key", issued["keyId"])
        assert revoked.returncode == 0, revoked.stderr
        with pytest.raises(Unauthenticated), db.transaction() as session:
            service.resolve_api_key(session, api_key=issued["apiKey"], now=utcnow())
    finally:
        db.dispose()


def test_failures_exit_non_zero_with_a_code(cli_env: dict[str, str]) -> None:
    assert _run(cli_env, "admin", "create-account", "a@example.com").returncode == 0
    again = _run(cli_env, "admin", "create-account", "A@example.com")
    assert again.returncode != 0 and "ACCOUNT_EXISTS" in again.stderr
    missing = _run(cli_env, "admin", "create-api-key", "nobody@example.com", "--json")
    assert missing.returncode != 0 and "ACCOUNT_NOT_FOUND" in missing.stderr
    assert missing.stdout == ""
    unknown = _run(cli_env, "admin", "revoke-api-key", "key_doesnotexist")
    assert unknown.returncode != 0 and "API_KEY_NOT_FOUND" in unknown.stderr


def test_create_account_with_points_grants_them(cli_env: dict[str, str]) -> None:
    from mercato.ledger import service as ledger

    created = _run(
        cli_env, "admin", "create-account", "rich@example.com", "--points", "250", "--json"
    )
    assert created.returncode == 0, created.stderr
    account_id = json.loads(created.stdout)["accountId"]
    db = _db(cli_env)
    try:
        with db.read() as session:
            assert ledger.balances(session, account_id=account_id).available == 250
            assert ledger.verify(session).balanced
    finally:
        db.dispose()
