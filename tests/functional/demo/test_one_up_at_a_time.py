"""One `mercato up` per data directory and per PostgreSQL database (DESIGN §11, decision 0551).

A second `mercato up` while one runs refuses with one line naming the running one's URL and
changes nothing: the first's API key still works, its recorded settings are untouched, and the
second started no process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.demo import UpProcess, free_port, wait_gone

pytestmark = pytest.mark.functional

SERVICE = "pixiv.daily-ranking"


def _invoke(info: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{info['url']}/v1/services/{SERVICE}/versions/v1:invoke",
        json={"chart": "manga", "limit": 1},
        headers={
            "Authorization": f"Bearer {info['apiKey']}",
            "Idempotency-Key": f"test-{uuid.uuid4().hex}",
        },
        timeout=60,
    )


def _refused(second: UpProcess) -> str:
    """The one line the second `mercato up` wrote before exiting non-zero."""
    assert second.process.wait(timeout=120) == 1, second.log()
    lines = second.log().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _first_and_refused_second(
    start_up: Callable[..., UpProcess], first_env: dict[str, str], second_env: dict[str, str]
) -> tuple[UpProcess, dict[str, Any], str]:
    first = start_up(first_env, "--json", "--port", str(free_port()))
    info = first.ready_json()
    assert _invoke(info).status_code == 200
    recorded = (Path(first_env["MERCATO_DATA_DIR"]) / "mercato-up.json").read_bytes()
    line = _refused(start_up(second_env, "--json", "--port", str(free_port())))
    # Nothing changed: the first's key still works (not revoked, the connection not re-pointed
    # to a provider that is gone), and its recorded settings are the same bytes.
    after = _invoke(info)
    assert after.status_code == 200, after.text
    assert after.json()["result"]["chart"] == "manga"
    assert (Path(first_env["MERCATO_DATA_DIR"]) / "mercato-up.json").read_bytes() == recorded
    return first, info, line


@pytest.mark.parametrize("database_env", ["sqlite"], indirect=True)
def test_a_second_up_on_the_same_data_dir_refuses_and_changes_nothing(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess]
) -> None:
    first, info, line = _first_and_refused_second(start_up, demo_env, demo_env)
    assert info["url"] in line
    assert "already running on the data directory" in line
    assert demo_env["MERCATO_DATA_DIR"] in line
    assert len(list((Path(demo_env["MERCATO_DATA_DIR"]) / "logs").iterdir())) == 4  # the first's
    assert first.stop() == 0
    assert wait_gone(list(info["pids"].values())) == []
    # Once the first stopped, the data dir is free again.
    again = start_up(demo_env, "--json", "--port", str(free_port()))
    info2 = again.ready_json()
    assert _invoke(info2).status_code == 200
    assert again.stop() == 0


@pytest.mark.parametrize("database_env", ["postgresql"], indirect=True)
def test_a_second_up_on_the_same_database_refuses_and_changes_nothing(
    demo_env: dict[str, str], start_up: Callable[..., UpProcess], tmp_path: Path
) -> None:
    other = demo_env | {"MERCATO_DATA_DIR": str(tmp_path / "other")}
    first, info, line = _first_and_refused_second(start_up, demo_env, other)
    assert info["url"] in line
    assert "already running on the database" in line
    assert demo_env["MERCATO_DATABASE_URL"].rsplit("/", 1)[1] in line
    # The second wrote nothing in its own data dir either: no settings, no logs.
    assert not (tmp_path / "other" / "mercato-up.json").exists()
    assert not (tmp_path / "other" / "logs").exists()
    assert first.stop() == 0
    assert wait_gone(list(info["pids"].values())) == []
