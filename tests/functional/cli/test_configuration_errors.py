"""A configuration error is one line naming the variable and the fix, exit 2, no traceback —
from every entry point, as a real process (issue 22 item 6, issue 23 item 4, DESIGN §10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

SHORT_SECRET = "short-secret-value"
DB_PASSWORD = "hunter2-not-for-logs"

# name -> the command line after `python -m`
ENTRY_POINTS = {
    "serve": ["mercato", "serve", "--port", "1"],
    "serve-workers": ["mercato", "serve", "--port", "1", "--workers", "2"],
    "worker": ["mercato", "worker"],
    "admin": ["mercato", "admin", "verify-ledger", "--json"],
    "migrate": ["mercato", "migrate"],
    "uvicorn-factory": [
        "uvicorn",
        "--factory",
        "mercato.web.asgi:create_app_from_env",
        "--port",
        "1",
    ],
}

# (variable, environment, what the line must also say)
BAD_SETTINGS = [
    ("MERCATO_SECRET_KEY", {}, "MERCATO_ENV=dev"),
    ("MERCATO_SECRET_KEY", {"MERCATO_SECRET_KEY": SHORT_SECRET}, "32"),
    ("MERCATO_ENV", {"MERCATO_ENV": "prod"}, "'production' or 'dev'"),
    ("MERCATO_DB_CONCURRENCY", {"MERCATO_ENV": "dev", "MERCATO_DB_CONCURRENCY": "x"}, "default 4"),
    (
        "MERCATO_DATABASE_URL",
        {"MERCATO_ENV": "dev", "MERCATO_DATABASE_URL": f"mysql://u:{DB_PASSWORD}@h/d"},
        "postgresql://",
    ),
    ("MERCATO_TRUSTED_PROXIES", {"MERCATO_ENV": "dev", "MERCATO_TRUSTED_PROXIES": "nginx"}, "CIDR"),
    (
        "MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES",
        {"MERCATO_ENV": "dev", "MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES": "maybe"},
        "valid boolean",
    ),
]


def _clean_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env["MERCATO_DATA_DIR"] = str(tmp_path / "var")
    env.update(settings)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _assert_one_line(
    result: subprocess.CompletedProcess[str], variable: str, also: str, code: int = 2
) -> str:
    err = result.stderr
    assert result.returncode == code, (result.returncode, err, result.stdout)
    assert "Traceback" not in err and "Traceback" not in result.stdout
    assert len(err.splitlines()) == 1, err
    assert variable in err and also in err, err
    assert SHORT_SECRET not in err and DB_PASSWORD not in err
    return err


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_missing_secret_key_in_production_is_one_line_from_every_entry_point(
    entry: str, tmp_path: Path
) -> None:
    result = _run(ENTRY_POINTS[entry], _clean_env(tmp_path), tmp_path)
    err = _assert_one_line(result, "MERCATO_SECRET_KEY", "32 or more characters")
    assert err.startswith("configuration error: MERCATO_SECRET_KEY is required")


def test_mercato_up_refuses_a_bad_setting_before_starting_anything(tmp_path: Path) -> None:
    # `mercato up` runs in dev mode unless told otherwise, so a secret is not required there.
    env = _clean_env(tmp_path, MERCATO_ENV="prod")
    result = _run(["mercato", "up", "--json"], env, tmp_path)
    err = _assert_one_line(result, "MERCATO_ENV", "'production' or 'dev'")
    assert err.startswith("configuration error: MERCATO_ENV")
    assert result.stdout == ""
    assert not (tmp_path / "var" / "logs").exists()  # no child was started


# Each bad variable through one of the entry points, in turn (every entry point reads the
# settings the same way; the test above runs each of them).
ROTATION = ["admin", "serve", "worker", "migrate"]


@pytest.mark.parametrize(
    ("entry", "variable", "settings", "also"),
    [(ROTATION[i % len(ROTATION)], *case) for i, case in enumerate(BAD_SETTINGS)],
    ids=[f"{variable}-{i}" for i, (variable, _, _) in enumerate(BAD_SETTINGS)],
)
def test_each_bad_variable_is_named_with_its_fix(
    entry: str, variable: str, settings: dict[str, str], also: str, tmp_path: Path
) -> None:
    result = _run(ENTRY_POINTS[entry], _clean_env(tmp_path, **settings), tmp_path)
    err = _assert_one_line(result, variable, also)
    assert err.startswith(f"configuration error: {variable}")


def test_a_data_dir_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = _clean_env(tmp_path, MERCATO_ENV="dev", MERCATO_DATA_DIR=str(blocker / "var"))
    for argv in (ENTRY_POINTS["admin"], ENTRY_POINTS["serve"], ["mercato", "up", "--json"]):
        result = _run(argv, env, tmp_path)
        err = _assert_one_line(result, "MERCATO_DATA_DIR", "directory this user can write")
        assert err.startswith("configuration error: MERCATO_DATA_DIR")


def test_an_unreachable_database_is_one_line_without_its_password(tmp_path: Path) -> None:
    # Nothing listens on port 1 of loopback: the connection is refused at once.
    url = f"postgresql://mercato:{DB_PASSWORD}@127.0.0.1:1/mercato"
    env = _clean_env(tmp_path, MERCATO_ENV="dev", MERCATO_DATABASE_URL=url)
    result = _run(ENTRY_POINTS["admin"], env, tmp_path)
    err = _assert_one_line(result, "MERCATO_DATABASE_URL", "is running", code=1)
    assert err.startswith("error: the database named by MERCATO_DATABASE_URL failed")


@pytest.mark.parametrize("command", ["refresh", "serve"])
def test_the_example_provider_names_its_bad_variable_on_one_line(
    command: str, tmp_path: Path
) -> None:
    env = _clean_env(tmp_path, MERCATO_ENV="dev", MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS="x")
    result = _run(["mercato", "daily-ranking", command], env, tmp_path)
    err = _assert_one_line(result, "MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS", "default 1.0")
    assert err.startswith("configuration error: MERCATO_DAILY_RANKING_REQUEST_DELAY_SECONDS")
