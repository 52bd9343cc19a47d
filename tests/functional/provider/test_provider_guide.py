"""docs/provider-guide.md, followed literally: its `sh` blocks run in order in one shell against
real processes (platform, worker, the provider `mercato provider init` wrote), on each store.

The guide's commands are run as written; the test only chooses free ports (the guide reads
PLATFORM_PORT and PROVIDER_PORT, defaulting to 8100 and 8180) and the database
(MERCATO_DATABASE_URL, which the guide leaves to the environment). A second test runs the guide
in the directory of a running `mercato up` (its default port and ./var, as the README starts it):
the guide stops at once on a port the demo holds, runs on its own, and the demo is untouched.
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

import httpx
import pytest
from sqlalchemy import select

from builders.demo import UpProcess
from builders.platform_process import free_port, platform_env
from mercato.accounts import service as accounts
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


def _invoke_demo(info: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{info['url']}/v1/services/{info['serviceCode']}/versions/{info['version']}:invoke",
        json={"chart": "manga", "limit": 1},
        headers={
            "Authorization": f"Bearer {info['apiKey']}",
            "Idempotency-Key": f"guide-beside-demo-{os.urandom(8).hex()}",
        },
        timeout=60,
    )


def _emails(data_dir: Path, *emails: str) -> dict[str, bool]:
    """Which of `emails` have an account in the SQLite database under `data_dir`."""
    runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir))
    try:
        with runtime.db.read() as session:
            return {e: accounts.find_account_by_email(session, email=e) is not None for e in emails}
    finally:
        runtime.db.dispose()


def test_the_provider_guide_runs_beside_a_running_demo_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    # The demo as the README starts it, in the directory the guide runs in: its default port
    # (8000 when free) and ./var.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    demo_var = tmp_path / "var"
    up = UpProcess(["--json"], clean | {"MERCATO_DATA_DIR": str(demo_var)}, tmp_path / "up.log")
    try:
        info = up.ready_json()
        demo_port = info["url"].rsplit(":", 1)[1]
        recorded = (demo_var / "mercato-up.json").read_bytes()
        assert _invoke_demo(info).status_code == 200

        env = platform_env("unused", tmp_path / "unused")
        del env["MERCATO_DATABASE_URL"], env["MERCATO_DATA_DIR"]  # the guide's own, by default
        env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            PROVIDER_PORT=str(free_port()),
            MERCATO_PROVIDER_TIMEOUT_SECONDS="10",
        )
        # On the demo's port the guide stops at that step, saying so, before any account or
        # provider exists (no readiness loop answered by the demo).
        taken = _run(guide_script(), env | {"PLATFORM_PORT": demo_port}, tmp_path)
        assert taken.returncode != 0
        assert f"platform: port {demo_port} is in use" in taken.stderr
        assert "9/9" not in taken.stdout
        assert not (tmp_path / "text-length").exists()

        # On its own port it runs to the end, with its data in ./guide-var.
        done = _run(guide_script(), env | {"PLATFORM_PORT": str(free_port())}, tmp_path)
        assert done.returncode == 0, f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        assert "9/9 passed" in done.stdout
        assert re.findall(r"^(SUBMITTED|APPROVED|PUBLISHED)$", done.stdout, re.M) == [
            "SUBMITTED",
            "APPROVED",
            "PUBLISHED",
        ]
        guide_people = ("you@example.com", "staff@example.com", "caller@example.com")
        assert all(_emails(tmp_path / "guide-var", *guide_people).values())

        # The demo is untouched: still running, its key works, its recorded settings are the
        # same bytes, and none of the guide's accounts is in its database.
        assert up.process.poll() is None
        answered = _invoke_demo(info)
        assert answered.status_code == 200, answered.text
        assert (demo_var / "mercato-up.json").read_bytes() == recorded
        assert not any(_emails(demo_var, *guide_people).values())
        assert up.stop() == 0
    finally:
        up.kill()
