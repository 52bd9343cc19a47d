"""`mercato admin ...` run beside a real `mercato up` with no MERCATO_* variable at all: it finds
the demo's recorded settings in ./var (decision 0271), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from builders.demo import UpProcess, free_port, wait_gone

pytestmark = pytest.mark.functional


def test_admin_commands_beside_the_demo_need_no_variable(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess], tmp_path: Path
) -> None:
    assert demo_env["MERCATO_DATA_DIR"] == str(tmp_path / "var")  # ./var seen from tmp_path
    up = start_up(demo_env, "--json", "--port", str(free_port()))
    info = up.ready_json()
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("MERCATO_")}

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mercato", "admin", *args],
            env=clean,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    verified = admin("verify-ledger", "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["balanced"] is True
    key = admin("create-api-key", "demo@caller.example", "--json")
    assert key.returncode == 0, key.stderr
    assert json.loads(key.stdout)["apiKey"].startswith("mercato_live_")
    assert up.stop(signal.SIGTERM) == 0
    assert wait_gone(list(info["pids"].values())) == []
