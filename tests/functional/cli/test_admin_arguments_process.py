"""Bad operator input as a real `mercato` process sees it: exit 2, one line, no traceback
(issue 19 item 11). The full table runs in-process in tests/integration/cli/."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders.accounts import make_account
from builders.platform_process import mercato, platform_env
from mercato.db.uow import Database

pytestmark = pytest.mark.functional


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["set-quota", "a@example.com", "--policy", "p", "--limit", "5",
             "--window-seconds", "9" * 25],
            "error: argument --window-seconds: must be from 1 to 31622400, not " + "9" * 25,
        ),
        (
            ["set-quota", "a@example.com", "--limit", "5"],
            "error: the following arguments are required: --policy, --window-seconds",
        ),
        (["unlock", "nobody@example.com"], "error: argument EMAIL: Account not found"),
        (["no-such-command"], "error: argument COMMAND: invalid choice: 'no-such-command'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    db_url: str, db: Database, tmp_path: Path, argv: list[str], line: str
) -> None:
    make_account(db, "a@example.com")
    result = mercato("admin", *argv, env=platform_env(db_url, tmp_path / "data"))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line)


def test_unlock_succeeds_for_a_known_email(db_url: str, db: Database, tmp_path: Path) -> None:
    make_account(db, "a@example.com")
    result = mercato("admin", "unlock", "A@example.com", env=platform_env(db_url, tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "lifted the login throttles of a@example.com\n"
