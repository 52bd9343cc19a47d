"""`mercato provider check` and `mercato provider push` as real processes: evidence and fixes,
pointed contract errors, create-or-update-then-submit, and one-line refusals of bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from builders.catalog import example_contract
from builders.platform_process import Serve, mercato, platform_env
from builders.providers import CREDENTIAL, Faults, reference_provider
from mercato.catalog.models import Version, VersionTransition
from mercato.db.runtime import Runtime
from mercato.settings import Settings

EMAIL, PASSWORD = "you@example.com", "provider password 1"
CONTRACT = example_contract(artifactContract=None)


def test_check_prints_each_check_with_evidence_and_what_to_fix(tmp_path: Path) -> None:
    env = platform_env("sqlite:///unused.db", tmp_path)
    with reference_provider() as good:
        passing = mercato("provider", "check", good.url, "--credential", CREDENTIAL, env=env)
    assert passing.returncode == 0, passing.stderr
    assert "9/9 passed" in passing.stdout and "fix:" not in passing.stdout
    with reference_provider(Faults(accept_wrong_credential=True)) as bad:
        failing = mercato(
            "provider", "check", bad.url, "--credential", CREDENTIAL, "--json", env=env
        )
    assert failing.returncode == 1
    report = json.loads(failing.stdout)
    assert report["passed"] is False and len(report["checks"]) == 9
    third = report["checks"][2]
    assert third["status"] == "failed" and "401" in third["fix"]
    assert third["detail"]["probeWithInvalidCredential"]["status"] == 200
    assert all(c["fix"] is None for c in report["checks"] if c["status"] == "passed")
    assert CREDENTIAL not in failing.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["check", "ftp://example.com", "--credential", "c"], "URL"),
        (["check", "http://127.0.0.1:9", "--credential", "has space"], "--credential"),
        (["push", "--version", "1", "--price", "2"], "--version"),
        (["push", "--version", "v1", "--price", "0"], "--price"),
        (["push", "--version", "v1", "--price", "2", "--contract", "missing.json"], "--contract"),
        (["push", "--version", "v1", "--price", "2", "--contract", "not-re2.json"], "--contract"),
        (["push", "--version", "v1", "--price", "2"], "MERCATO_EMAIL"),
        (
            ["push", "--version", "v1", "--price", "2", "--description", "x" * 10_001],
            "--description",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_them(tmp_path: Path, args: list[str], named: str) -> None:
    (tmp_path / "contract.json").write_text(json.dumps(CONTRACT))
    # A pattern RE2 does not compile is refused before anything is sent (issue 39 item 1).
    not_re2 = {**CONTRACT, "resultSchema": {"patternProperties": {"^(?!tmp)": {}}}}
    (tmp_path / "not-re2.json").write_text(json.dumps(not_re2))
    args = [str(tmp_path / a) if a == "not-re2.json" else a for a in args]
    if args[0] == "push":
        args = [*args, "--service-code", "acme.tool", "--connection", "pcon_x"]
        if "--contract" not in args:
            args += ["--contract", str(tmp_path / "contract.json")]
    env = platform_env("sqlite:///unused.db", tmp_path)
    done = mercato("provider", *args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[tuple[Serve, dict[str, str]]]:
    env = platform_env(db_url, tmp_path / "data", MERCATO_PROVIDER_TIMEOUT_SECONDS="10")
    assert (
        mercato("admin", "create-account", EMAIL, "--password", PASSWORD, env=env).returncode == 0
    )
    serve = Serve(env, tmp_path / "serve.log")
    try:
        yield (
            serve,
            {**env, "MERCATO_URL": serve.url, "MERCATO_EMAIL": EMAIL, "MERCATO_PASSWORD": PASSWORD},
        )
    finally:
        serve.stop()


def _transitions(db_url: str, tmp_path: Path) -> list[tuple[str, str]]:
    runtime = Runtime.from_settings(Settings(env="dev", database_url=db_url, data_dir=tmp_path))
    try:
        with runtime.db.read() as session:
            assert session.scalar(select(func.count()).select_from(Version)) == 1
            rows = session.execute(
                select(VersionTransition.from_state, VersionTransition.to_state).order_by(
                    VersionTransition.seq
                )
            ).all()
            return [(str(a), str(b)) for a, b in rows]
    finally:
        runtime.db.dispose()


# Store-agnostic (decision 0390): the provider's tooling, not the store, is under test here.
@pytest.mark.sqlite_only
def test_push_creates_updates_and_submits_through_the_provider_api(
    platform: tuple[Serve, dict[str, str]], db_url: str, tmp_path: Path
) -> None:
    serve, env = platform
    with reference_provider() as provider:
        token = httpx.post(
            serve.url + "/v1/auth/login", json={"email": EMAIL, "password": PASSWORD}
        ).json()["accessToken"]
        made = httpx.post(
            serve.url + "/v1/provider/connections",
            json={"name": "main", "baseUrl": provider.url, "credential": CREDENTIAL},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert made.status_code == 201, made.text
        connection = made.json()["connectionId"]
        contract = tmp_path / "contract.json"
        push = ["provider", "push", "--contract", str(contract), "--service-code", "acme.tool"]
        push += ["--version", "v1", "--connection", connection, "--json"]

        contract.write_text(json.dumps({**CONTRACT, "requestSchema": {"type": "nope"}}))
        # The listing is made before the draft is refused: its name and description with it.
        described = ["--description", "Answers a tool's result.", "--display-name", "Acme Tool"]
        refused = mercato(*push, "--price", "2", *described, env=env)
        assert refused.returncode == 1
        assert "INVALID_CONTRACT" in refused.stderr and "/requestSchema/type" in refused.stderr

        contract.write_text(json.dumps(CONTRACT))
        first = mercato(*push, "--price", "2", env=env)
        assert first.returncode == 0, first.stderr
        assert first.stderr == ""  # no httpx request log lines (issue 41 item 5)
        assert json.loads(first.stdout)["state"] == "SUBMITTED"
        listing = httpx.get(
            serve.url + "/v1/provider/listings/acme.tool/versions",
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert (listing["displayName"], listing["description"]) == (
            "Acme Tool",
            "Answers a tool's result.",
        )
        # Nothing changed: stays submitted; another description is not applied, and said so.
        again = mercato(*push, "--price", "2", "--description", "Something else.", env=env)
        assert json.loads(again.stdout)["state"] == "SUBMITTED"
        assert again.stderr.splitlines() == [
            "note: acme.tool already exists; --description applies only when push creates the "
            "listing, so it was not changed"
        ]
        changed = mercato(*push, "--price", "3", env=env)  # an edit: back to DRAFT, resubmitted
        assert json.loads(changed.stdout)["state"] == "SUBMITTED"
        with reference_provider() as elsewhere:
            # The connection moves: the version is submitted again, bound to the new revision.
            moved = mercato(
                "admin", "update-connection", connection, "--base-url", elsewhere.url, env=env
            )
            assert moved.returncode == 0, moved.stderr
            rebound = mercato(*push, "--price", "3", env=env)
            assert rebound.returncode == 0, rebound.stderr
            assert json.loads(rebound.stdout)["state"] == "SUBMITTED"
            assert (
                json.loads(rebound.stdout)["submittedRunId"]
                != json.loads(changed.stdout)["submittedRunId"]
            )
    assert _transitions(db_url, tmp_path) == [
        ("None", "DRAFT"),
        ("DRAFT", "SUBMITTED"),
        ("SUBMITTED", "DRAFT"),
        ("DRAFT", "SUBMITTED"),
        ("SUBMITTED", "SUBMITTED"),
    ]


def test_the_generated_test_judges_with_the_platforms_own_checks(tmp_path: Path) -> None:
    """Issue 39 item 1: `mercato provider init`'s test uses the platform's contract check and
    schema engine (decision 0517): a pattern RE2 does not compile, or a result the handler
    gives that its schema refuses, fails it before anything is pushed."""
    env = platform_env("sqlite:///unused.db", tmp_path)
    project = tmp_path / "project"
    assert mercato("provider", "init", str(project), env=env).returncode == 0
    contract = json.loads((project / "contract.json").read_text())
    contract["requestSchema"]["properties"]["text"]["pattern"] = "^(?!\\s)"
    contract["resultSchema"]["properties"]["length"]["maximum"] = 3
    (project / "contract.json").write_text(json.dumps(contract))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not nine"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 failed" in done.stdout, done.stdout
    assert "/requestSchema/properties/text/pattern" in done.stdout
    assert "not an RE2 pattern" in done.stdout
    assert "/length" in done.stdout  # the handler's result for "hello" has length 5 > 3


# Each drift: what is replaced in the generated provider.py, and what the failing test shows.
DRIFTS = {
    "a required result member dropped": (
        'return Success({"text": text, "length": len(text)})',
        'return Success({"text": text})',
        "test_each_result_keeps_the_result_schema_and_size",
        "'length' is a required property",
    ),
    "a result over responseMaxBytes": (
        'return Success({"text": text, "length": len(text)})',
        'return Success({"text": text * 20, "length": len(text)})',
        "test_each_result_keeps_the_result_schema_and_size",
        "the answer is over responseMaxBytes",
    ),
}


def _run_generated_tests(project: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_the_generated_test_catches_a_handler_that_drifts_from_its_contract(
    tmp_path: Path, drift: str
) -> None:
    """Issue 41 item 3: a handler whose results break contract.json (a required member dropped,
    an answer over responseMaxBytes) fails the generated test before its nine checks, which
    pass: they alone would not catch it (decision 0555)."""
    env = platform_env("sqlite:///unused.db", tmp_path)
    project = tmp_path / "project"
    assert mercato("provider", "init", str(project), env=env).returncode == 0
    old, new, failing, reason = DRIFTS[drift]
    source = (project / "provider.py").read_text()
    assert old in source
    (project / "provider.py").write_text(source.replace(old, new))
    out = _run_generated_tests(project, env)
    failed = [line for line in out.splitlines() if " FAILED" in line]
    assert failed and all(failing in line for line in failed), out
    assert reason in out, out
    nine = out.index("test_the_nine_conformance_checks_pass PASSED")
    assert out.index(failing) < nine  # judged against the contract first


def test_the_generated_test_refuses_an_example_request_the_contract_refuses(
    tmp_path: Path,
) -> None:
    """Issue 41 item 3: an example request that breaks contract.json's request schema fails the
    generated test, naming the member, before the nine checks run."""
    env = platform_env("sqlite:///unused.db", tmp_path)
    project = tmp_path / "project"
    assert mercato("provider", "init", str(project), env=env).returncode == 0
    source = (project / "test_provider.py").read_text()
    examples = '[{"text": "hello"}, '
    assert examples in source
    broken = source.replace(examples, '[{"text": "hello", "lang": "en"}, ')
    (project / "test_provider.py").write_text(broken)
    out = _run_generated_tests(project, env)
    failed = [line for line in out.splitlines() if " FAILED" in line]
    assert len(failed) == 1, out
    assert "test_each_example_request_keeps_the_request_schema_and_size[payload0]" in failed[0]
    assert "'lang' was unexpected" in out, out
    assert out.index("FAILED") < out.index("test_the_nine_conformance_checks_pass")
