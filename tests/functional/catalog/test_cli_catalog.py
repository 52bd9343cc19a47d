"""The operator CLI for real: publish, hold, release-hold, then the catalog over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.accounts import make_account
from builders.catalog import SERVICE_CODE, example_contract, make_connection, make_provider
from builders.platform_process import probe
from mercato.catalog import service as catalog
from mercato.catalog.contracts import build_contract
from mercato.db.runtime import Runtime

# The CLI's wiring (arguments, output, exit codes) is under test here; the catalog's rules run
# on both stores in tests/integration/catalog (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]


@pytest.fixture
def env(runtime: Runtime, db_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MERCATO_ENV": "dev",
        "MERCATO_DATABASE_URL": db_url,
        "MERCATO_DATA_DIR": str(tmp_path / "cli-data"),
    }


def mercato(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def json_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def publish_args(connection_id: str, contract: Path, *extra: str) -> list[str]:
    return [
        "admin", "publish", "--connection", connection_id, "--service-code", SERVICE_CODE,
        "--display-name", "pixiv daily ranking", "--version", "v1", "--price", "10",
        "--contract", str(contract), *extra,
    ]  # fmt: skip


def _is_public(runtime: Runtime) -> bool:
    with runtime.db.read() as session:
        listing = catalog.get_listing(session, service_code=SERVICE_CODE)
        return catalog.is_public(session, listing_id=listing.id)


def test_publish_hold_release_through_the_cli(
    runtime: Runtime, env: dict[str, str], tmp_path: Path
) -> None:
    _, connection_id = make_provider(runtime)
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(example_contract()))

    published = json_of(mercato(env, *publish_args(connection_id, contract, "--json")))
    assert set(published) == {"serviceCode", "version", "contractDigest", "versionId"}
    expected = build_contract(example_contract(), service_code=SERVICE_CODE, version="v1")
    assert published["contractDigest"] == expected.contract_digest
    assert (published["serviceCode"], published["version"]) == (SERVICE_CODE, "v1")
    assert _is_public(runtime)

    again = json_of(mercato(env, *publish_args(connection_id, contract, "--json")))
    assert again == published

    changed = mercato(env, *publish_args(connection_id, contract, "--price", "11"))
    assert changed.returncode != 0 and "VERSION_IMMUTABLE" in changed.stderr

    first = json_of(mercato(env, "admin", "hold", SERVICE_CODE, "--reason", "review", "--json"))
    second = json_of(mercato(env, "admin", "hold", SERVICE_CODE, "--reason", "report", "--json"))
    assert set(first) == {"holdId"} and first != second
    assert not _is_public(runtime)

    assert mercato(env, "admin", "release-hold", first["holdId"]).returncode == 0
    assert not _is_public(runtime)
    assert mercato(env, "admin", "release-hold", second["holdId"]).returncode == 0
    assert _is_public(runtime)

    twice = mercato(env, "admin", "release-hold", first["holdId"])
    assert twice.returncode != 0 and "HOLD_ALREADY_RELEASED" in twice.stderr


def test_cli_refusals(runtime: Runtime, env: dict[str, str], tmp_path: Path) -> None:
    owner_id = make_account(runtime.db, "provider@example.com")
    pending = make_connection(runtime, owner_id, approved=False)
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(example_contract()))
    refused = mercato(env, *publish_args(pending, contract))
    assert refused.returncode != 0 and "CONNECTION_NOT_APPROVED" in refused.stderr

    approved = make_connection(runtime, owner_id, name="approved")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(example_contract(providerOutcomes=["SUCCEEDED"])))
    invalid = mercato(env, *publish_args(approved, broken))
    assert invalid.returncode != 0 and "INVALID_CONTRACT" in invalid.stderr
    broken.write_text("{not json")
    assert "INVALID_CONTRACT" in mercato(env, *publish_args(approved, broken)).stderr

    unknown = mercato(env, "admin", "hold", "nobody.here", "--reason", "x")
    assert unknown.returncode != 0 and "LISTING_NOT_FOUND" in unknown.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mercato", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            assert process.poll() is None, "the server exited"
            try:
                if probe().get(f"{base}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.1)  # polling a condition with a bounded deadline
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_cli_publication_is_served_over_http(
    runtime: Runtime, env: dict[str, str], tmp_path: Path, server: str
) -> None:
    _, connection_id = make_provider(runtime)
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(example_contract()))
    published = json_of(mercato(env, *publish_args(connection_id, contract, "--json")))
    url = f"{server}/v1/catalog/listings/{SERVICE_CODE}/versions/v1/contract"
    response = httpx.get(url)
    assert response.status_code == 200
    assert response.json()["contractDigest"] == published["contractDigest"]
    assert response.headers["etag"] == f'"{published["contractDigest"]}"'
    assert httpx.get(url, headers={"If-None-Match": response.headers["etag"]}).status_code == 304


def test_publish_names_the_publisher_and_keeps_only_an_example_the_contract_accepts(
    runtime: Runtime, env: dict[str, str], tmp_path: Path
) -> None:
    from mercato.catalog.examples import daily_ranking_examples
    from mercato.catalog.models import Listing, Version

    _, connection_id = make_provider(runtime)
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(example_contract()))
    examples = tmp_path / "examples.json"
    examples.write_text(json.dumps([{"request": {"limit": 3}, "result": {"chart": "illust"}}]))
    refused = mercato(env, *publish_args(connection_id, contract, "--examples", str(examples)))
    assert refused.returncode == 2 and "--examples" in refused.stderr
    assert "/examples/0/request" in refused.stderr and "chart" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    examples.write_text("[not json")
    unreadable = mercato(env, *publish_args(connection_id, contract, "--examples", str(examples)))
    assert unreadable.returncode == 2 and "--examples" in unreadable.stderr
    with runtime.db.read() as session:
        assert session.query(Version).count() == 0  # nothing written by either refusal

    examples.write_text(json.dumps(daily_ranking_examples()))
    extra = ("--examples", str(examples), "--publisher", "Ranking Co")
    assert mercato(env, *publish_args(connection_id, contract, *extra)).returncode == 0
    with runtime.db.read() as session:
        version = session.query(Version).one()
        listing = session.query(Listing).one()
        assert version.examples == daily_ranking_examples()
        assert listing.publisher_name == "Ranking Co"
