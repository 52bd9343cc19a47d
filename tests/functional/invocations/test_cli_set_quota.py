"""`mercato admin set-quota` and `mercato worker --once` as real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from builders.platform_process import mercato, platform_env
from mercato.db.engine import make_engine
from mercato.db.uow import Database
from mercato.quotas.models import QuotaOverride

pytestmark = pytest.mark.functional


def test_set_quota_gives_the_account_its_policy(db_url: str, tmp_path: Path) -> None:
    env = platform_env(db_url, tmp_path / "data")
    created = mercato("admin", "create-account", "q@example.com", "--json", env=env)
    assert created.returncode == 0, created.stderr
    result = mercato(
        "admin",
        "set-quota",
        "q@example.com",
        "--policy",
        "gold",
        "--limit",
        "5",
        "--window-seconds",
        "10",
        "--json",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "email": "q@example.com",
        "policy": "gold",
        "limit": 5,
        "windowSeconds": 10,
    }
    db = Database(make_engine(db_url))
    with db.read() as session:
        row = session.execute(
            select(QuotaOverride.policy, QuotaOverride.limit, QuotaOverride.window_seconds)
        ).one()
    db.dispose()
    assert tuple(row) == ("gold", 5, 10)

    unknown = mercato(
        "admin",
        "set-quota",
        "nobody@example.com",
        "--policy",
        "gold",
        "--limit",
        "5",
        "--window-seconds",
        "10",
        env=env,
    )
    assert unknown.returncode != 0 and "ACCOUNT_NOT_FOUND" in unknown.stderr
    bad = mercato(
        "admin",
        "set-quota",
        "q@example.com",
        "--policy",
        "gold",
        "--limit",
        "0",
        "--window-seconds",
        "10",
        env=env,
    )
    assert bad.returncode != 0


def test_worker_once_on_an_idle_database(db_url: str, tmp_path: Path) -> None:
    ran = mercato("worker", "--once", env=platform_env(db_url, tmp_path / "data"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "0"
