"""`mercato admin ...` beside the demo needs no variable: it reads the settings `mercato up`
recorded in its data dir (decision 0271), on both stores, as real processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mercato.settings import DEMO_SETTINGS_FILE, load_settings, record_demo_settings

SECRET = "a-secret-key-of-more-than-32-characters-for-the-demo"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("MERCATO_")}


def _mercato(*args: str, cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=_clean_env() | settings,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def demo_dir(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory where `mercato up` ran with its defaults (data dir ./var) and `db_url`."""
    for name in list(os.environ):
        if name.upper().startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MERCATO_ENV", "dev")  # what `mercato up` sets for itself
    monkeypatch.setenv("MERCATO_DATABASE_URL", db_url)
    monkeypatch.setenv("MERCATO_SIGNUP_POINTS", "25")
    path = record_demo_settings(load_settings())
    assert path == (tmp_path / "var" / DEMO_SETTINGS_FILE).resolve()
    return tmp_path


def test_the_recorded_settings_are_private_and_hold_no_secret(
    demo_dir: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERCATO_SECRET_KEY", SECRET)
    path = record_demo_settings(load_settings())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    assert SECRET not in path.read_text()
    assert document["secretKeyGiven"] is True
    assert document["settings"] == {
        "MERCATO_DATABASE_URL": db_url,
        "MERCATO_DATA_DIR": str((demo_dir / "var").resolve()),
        "MERCATO_ENV": "dev",
        "MERCATO_SIGNUP_POINTS": "25",
    }


def test_admin_commands_beside_the_demo_need_no_variable(demo_dir: Path) -> None:
    created = _mercato(
        "admin", "create-account", "ops@example.com", "--points", "40", "--json", cwd=demo_dir
    )
    assert created.returncode == 0, created.stderr
    verified = _mercato("admin", "verify-ledger", "--json", cwd=demo_dir)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["balanced"] is True
    # The same account is seen through the recorded database: a second create is refused.
    again = _mercato("admin", "create-account", "ops@example.com", cwd=demo_dir)
    assert again.returncode != 0 and "Traceback" not in again.stderr


def test_variables_in_the_environment_win_and_another_database_ignores_the_demo(
    demo_dir: Path, tmp_path: Path
) -> None:
    # A bad value in the environment is reported, not silently replaced by the recorded one.
    bad = _mercato("admin", "verify-ledger", cwd=demo_dir, MERCATO_SIGNUP_POINTS="lots")
    assert bad.returncode == 2 and bad.stderr.startswith("configuration error: MERCATO_SIGNUP")
    # Another database is not the demo's: its settings (dev mode) do not apply there.
    other = f"sqlite:///{tmp_path / 'other.db'}"
    elsewhere = _mercato("admin", "verify-ledger", cwd=demo_dir, MERCATO_DATABASE_URL=other)
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.startswith("configuration error: MERCATO_SECRET_KEY is required")


def test_admin_away_from_the_demo_says_where_its_settings_were_expected(
    demo_dir: Path, tmp_path: Path
) -> None:
    # Run from another directory, `admin` finds no recorded settings: the one line still names
    # MERCATO_SECRET_KEY, and says which mercato-up.json it looked for and how to point at it.
    away = tmp_path / "elsewhere"
    away.mkdir()
    result = _mercato("admin", "verify-ledger", cwd=away)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("configuration error: MERCATO_SECRET_KEY is required")
    assert (
        f"no `mercato up` settings at {(away / 'var' / DEMO_SETTINGS_FILE).resolve()}" in lines[0]
    )
    assert "set MERCATO_DATA_DIR to its data dir" in lines[0]
    # Pointed at the demo's data dir, the same command works from there.
    pointed = _mercato("admin", "verify-ledger", cwd=away, MERCATO_DATA_DIR=str(demo_dir / "var"))
    assert pointed.returncode == 0, pointed.stderr


def test_only_admin_commands_read_the_demo_settings(demo_dir: Path) -> None:
    # A server started in the demo's directory without settings stays fail-closed.
    served = _mercato("serve", "--port", "1", cwd=demo_dir)
    assert served.returncode == 2
    assert served.stderr.startswith("configuration error: MERCATO_SECRET_KEY is required")


def test_an_unreadable_record_is_one_line_naming_the_file(demo_dir: Path) -> None:
    (demo_dir / "var" / DEMO_SETTINGS_FILE).write_text("{not json")
    result = _mercato("admin", "verify-ledger", cwd=demo_dir)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("configuration error: MERCATO_DATA_DIR: the demo settings")
    assert "Traceback" not in result.stderr


def test_a_demo_run_with_its_own_secret_key_needs_it_here_too(
    demo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERCATO_SECRET_KEY", SECRET)
    record_demo_settings(load_settings())
    refused = _mercato("admin", "verify-ledger", cwd=demo_dir)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("configuration error: MERCATO_SECRET_KEY: the demo")
    given = _mercato("admin", "verify-ledger", cwd=demo_dir, MERCATO_SECRET_KEY=SECRET)
    assert given.returncode == 0, given.stderr
