"""`mercato provider push --examples FILE --publisher NAME` (issue 41 item 4): the example goes
with the draft and the platform judges it against the contract; the publisher names the listing.
A bad file exits 2 naming --examples; an example the contract refuses is the platform's
INVALID_EXAMPLE with its pointer, and nothing is drafted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from builders.catalog import example_contract
from builders.platform_process import Serve, mercato, platform_env
from builders.providers import CREDENTIAL, reference_provider

EMAIL, PASSWORD = "you@example.com", "provider password 1"
CONTRACT = example_contract(artifactContract=None)
GOOD = [{"request": {"chart": "manga", "limit": 1}, "result": {"chart": "manga", "entries": []}}]

# Store-agnostic (decision 0390): the provider's tooling, not the store, is under test here.
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[tuple[Serve, dict[str, str]]]:
    env = platform_env(db_url, tmp_path / "data", MERCATO_PROVIDER_TIMEOUT_SECONDS="10")
    made = mercato("admin", "create-account", EMAIL, "--password", PASSWORD, env=env)
    assert made.returncode == 0
    serve = Serve(env, tmp_path / "serve.log")
    try:
        yield (
            serve,
            {**env, "MERCATO_URL": serve.url, "MERCATO_EMAIL": EMAIL, "MERCATO_PASSWORD": PASSWORD},
        )
    finally:
        serve.stop()


def test_a_bad_examples_file_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "contract.json").write_text(json.dumps(CONTRACT))
    (tmp_path / "object.json").write_text('{"request": {}}')
    env = platform_env("sqlite:///unused.db", tmp_path)
    base = ["provider", "push", "--contract", str(tmp_path / "contract.json"), "--price", "2"]
    base += ["--service-code", "acme.tool", "--version", "v1", "--connection", "pcon_x"]
    for name in ("missing.json", "object.json"):
        done = mercato(*base, "--examples", str(tmp_path / name), env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "--examples" in done.stderr


def test_push_sends_the_example_and_names_the_publisher(
    platform: tuple[Serve, dict[str, str]], tmp_path: Path
) -> None:
    serve, env = platform
    with reference_provider() as provider:
        token = httpx.post(
            serve.url + "/v1/auth/login", json={"email": EMAIL, "password": PASSWORD}
        ).json()["accessToken"]
        headers = {"Authorization": f"Bearer {token}"}
        made = httpx.post(
            serve.url + "/v1/provider/connections",
            json={"name": "main", "baseUrl": provider.url, "credential": CREDENTIAL},
            headers=headers,
            timeout=60,
        )
        assert made.status_code == 201, made.text
        contract, examples = tmp_path / "contract.json", tmp_path / "examples.json"
        contract.write_text(json.dumps(CONTRACT))
        push = ["provider", "push", "--contract", str(contract), "--service-code", "acme.tool"]
        push += ["--version", "v1", "--connection", made.json()["connectionId"], "--price", "2"]
        push += ["--examples", str(examples), "--publisher", "Acme  Tools", "--json"]

        examples.write_text(json.dumps([{"request": {"limit": 1}, "result": {"x": 1}}]))
        refused = mercato(*push, env=env)
        assert refused.returncode == 1
        assert "INVALID_EXAMPLE" in refused.stderr and "/examples/0/request" in refused.stderr
        listing = httpx.get(serve.url + "/v1/provider/listings/acme.tool/versions", headers=headers)
        assert listing.json()["versions"] == []  # nothing drafted

        examples.write_text(json.dumps(GOOD))
        pushed = mercato(*push, env=env)
        assert pushed.returncode == 0, pushed.stderr
        version_id = json.loads(pushed.stdout)["versionId"]
        version = httpx.get(serve.url + f"/v1/provider/versions/{version_id}", headers=headers)
        assert version.json()["examples"] == GOOD
        listing = httpx.get(serve.url + "/v1/provider/listings/acme.tool/versions", headers=headers)
        assert listing.json()["publisherName"] == "Acme Tools"
