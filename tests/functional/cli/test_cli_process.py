"""The click CLI as a real process (decision 0300): `mercato --version` from the installed
distribution, the bash completion script from click's own variable, and a usage error that is
one line with exit 2 from the console script itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional


def _mercato(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = shutil.which("mercato", path=os.path.dirname(sys.executable))
    assert script is not None, "the mercato console script is installed beside python"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MERCATO_", "_MERCATO"))}
    return subprocess.run(
        [script, *argv],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_version_from_the_console_script() -> None:
    result = _mercato("--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"mercato {version('mercato')}\n",
        "",
    )


def test_bash_completion_script_can_be_sourced() -> None:
    script = _mercato(_MERCATO_COMPLETE="bash_source")
    assert script.returncode == 0 and "complete -o nosort -F _mercato_completion" in script.stdout
    bash = shutil.which("bash")
    assert bash is not None
    checked = subprocess.run(
        [bash, "-n"], input=script.stdout, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_a_usage_error_from_the_console_script_is_one_line() -> None:
    result = _mercato("admin", "grant-points", "a@example.com", "--points", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == ["error: unrecognized arguments: --points"]


def test_migrate_prints_plain_lines_and_no_alembic_chatter(tmp_path: Path) -> None:
    """Issue 41 item 5: as a real process, `mercato migrate` writes one line per migration to
    stdout and nothing of Alembic's own log ("Context impl", "Running upgrade") to stderr."""
    env = {"MERCATO_ENV": "dev", "MERCATO_DATA_DIR": str(tmp_path / "var")}
    first = _mercato("migrate", **env)
    again = _mercato("migrate", **env)
    assert (first.returncode, first.stderr) == (0, ""), first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == "applied 0001_accounts: Accounts, API keys, sessions"
    assert all(line.startswith("applied ") for line in lines[:-1])
    head = lines[-1].removeprefix("migrated to ")
    assert head != lines[-1] and lines[-2].startswith(f"applied {head}: ")
    assert (again.returncode, again.stdout, again.stderr) == (
        0,
        f"already up to date ({head})\n",
        "",
    )
