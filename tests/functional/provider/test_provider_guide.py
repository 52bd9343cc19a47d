"""docs/provider-guide.md, followed literally: its `sh` blocks run in order in one shell against
real processes (platform, worker, the provider `mercato provider init` wrote), on each store.

The guide's commands are run as written; the test only chooses free ports (the guide reads
PLATFORM_PORT and PROVIDER_PORT, defaulting to 8000 and 8080) and the database
(MERCATO_DATABASE_URL, which the guide leaves to the environment).
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from builders.platform_process import free_port, platform_env
from mercato.catalog.models import Version
from mercato.db.runtime import Runtime
from mercato.ledger import checks
from mercato.settings import Settings

GUIDE = Path(__file__).parents[3] / "docs" / "provider-guide.md"


def guide_script() -> str:
    """Every `sh` block of the guide, in order, as one script."""
    blocks = re.findall(r"^```sh\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) >= 7, "the guide's walk-through lost its shell blocks"
    return "\n".join(blocks)


def _run(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the guide's background processes share this group
    )
    try:
        out, err = process.communicate(timeout=900)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


# Store-agnostic (decision 0390): the provider's tooling, not the store, is under test here.
@pytest.mark.sqlite_only
def test_the_provider_guide_works_as_written(db_url: str, tmp_path: Path) -> None:
    env = platform_env(db_url, tmp_path / "unused")
    del env["MERCATO_DATA_DIR"]  # the guide sets its own
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PLATFORM_PORT=str(free_port()),
        PROVIDER_PORT=str(free_port()),
        MERCATO_PROVIDER_TIMEOUT_SECONDS="10",
    )
    done = _run(guide_script(), env, tmp_path)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    out = done.stdout
    assert "9/9 passed" in out  # mercato provider check
    assert re.search(r"^True$", out, re.M)  # the registered connection's latest run passed
    states = re.findall(r"^(SUBMITTED|APPROVED|PUBLISHED)$", out, re.M)
    assert states == ["SUBMITTED", "APPROVED", "PUBLISHED"]
    earnings = ast.literal_eval((tmp_path / "text-length" / "earnings.txt").read_text())
    assert earnings == {"pointsPerCall": 1, "providerShareBps": 8000, "earnedPoints": 1}

    runtime = Runtime.from_settings(
        Settings(env="dev", database_url=db_url, data_dir=tmp_path / "var")
    )
    try:
        with runtime.db.read() as session:
            version = session.scalars(select(Version)).one()
            assert (version.label, version.state, version.price) == ("v1", "PUBLISHED", 2)
            assert checks.run_checks(session).balanced
    finally:
        runtime.db.dispose()
