"""`mercato call` and `mercato catalog` against `mercato up`'s demo: real processes throughout."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders.demo import UpProcess, free_port
from mercato.client import MercatoClient

# The caller's CLI is under test here, not the store: the charge it causes runs on both stores
# in tests/integration/invocations (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]

SERVICE = "pixiv.daily-ranking"


@pytest.fixture
def demo(db_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(MERCATO_DATA_DIR=str(tmp_path / "var"), MERCATO_DATABASE_URL=db_url)
    up = UpProcess(["--json", "--port", str(free_port())], env, tmp_path / "up.stderr.log")
    try:
        yield up.ready_json()
    finally:
        up.stop()
        up.kill()


def call(demo: dict[str, Any], *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(MERCATO_URL=demo["url"], MERCATO_API_KEY=demo["apiKey"])
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_mercato_call_prints_the_ranking_and_saves_verified_thumbnails(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "thumbnails"
    payload = json.dumps({"chart": "illust", "limit": 5})

    ran = call(demo, "call", SERVICE, "v1", "--input", "-", "--out", str(out), stdin=payload)

    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["chart"] == "illust"
    assert [e["rank"] for e in result["entries"]] == [1, 2, 3, 4, 5]
    saved = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in out.iterdir()}
    assert set(saved) == {e["thumbnailDigest"] for e in result["entries"]}
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in saved.values())
    assert "\r" not in ran.stderr  # no spinner when stderr is not a terminal
    assert demo["apiKey"] not in ran.stderr + ran.stdout


def test_mercato_call_with_a_key_is_one_charge_failures_are_one_line_and_catalog_lists(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    payload = json.dumps({"chart": "manga", "limit": 3})
    source = tmp_path / "input.json"
    source.write_text(payload)
    with MercatoClient(demo["url"], demo["apiKey"]) as client:
        before = client.balance().available

        first = call(demo, "call", SERVICE, "v1", "--input", str(source), "--key", "k-1", stdin="")
        again = call(demo, "call", SERVICE, "v1", "--input", "-", "--key", "k-1", stdin=payload)
        unknown = '{"chart": "manga", "snapshotId": "no-such-snapshot"}'
        failed = call(demo, "call", SERVICE, "v1", "--input", "-", stdin=unknown)
        refused = call(demo, "call", SERVICE, "v1", "--input", "-", stdin='{"chart": "nope"}')

        after = client.balance().available

    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert json.loads(first.stdout) == json.loads(again.stdout)
    assert before - after == 10  # the replay under the same key spent nothing
    assert failed.returncode == 1 and failed.stdout == ""
    (line,) = failed.stderr.splitlines()
    assert line.startswith("error: PROVIDER_DEFINED_FAILURE: ") and "UNKNOWN_SNAPSHOT" in line
    # A chart the contract does not allow never reaches the provider (decision 0205).
    assert refused.returncode == 1 and refused.stdout == ""
    line, *located = refused.stderr.splitlines()
    assert line.startswith("error: REQUEST_SCHEMA_VIOLATION: ")
    # Each error's pointer and detail follows on its own line (issue 41 item 5).
    assert located and located[0].startswith("  /chart: 'nope' is not one of "), refused.stderr

    text = call(demo, "catalog", "--url", demo["url"], stdin="")
    as_json = call(demo, "catalog", "--json", stdin="")
    assert text.returncode == 0, text.stderr
    (row,) = [line.split() for line in text.stdout.splitlines() if SERVICE in line]
    assert row[0] == SERVICE and row[-3:] == ["v1", "10", "points"]  # a table row (decision 0301)
    (listing,) = [i for i in json.loads(as_json.stdout)["items"] if i["serviceCode"] == SERVICE]
    assert listing["versions"] == [{"version": "v1", "price": 10}]


DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_snippets_of_docs_client_md_run_against_the_demo(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 41 item 5: docs/client.md's Python snippets, run in order as one program against the
    demo (its URL for the documented one): the schema error prints its pointer, the defined
    failure its provider's code."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "client.md").read_text(), re.S)
    assert len(blocks) == 2
    program = "\n".join(blocks).replace("http://127.0.0.1:8000", demo["url"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env["MERCATO_API_KEY"] = demo["apiKey"]
    ran = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert any(line.startswith("/chart: 'weekly' is not one of ") for line in lines), ran.stdout
    assert lines[-1] == "UNKNOWN_SNAPSHOT", ran.stdout
    assert len(list((tmp_path / "thumbnails").iterdir())) == 10
