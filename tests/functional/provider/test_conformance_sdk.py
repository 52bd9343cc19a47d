"""The platform's conformance check passes all nine against an SDK provider over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from builders.provider import AUTH, CREDENTIAL
from mercato.conformance.runner import run_conformance
from mercato.dispatch.client import ProviderClient
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

pytestmark = pytest.mark.functional


@pytest.fixture
def client(tmp_path: Path) -> Iterator[ProviderClient]:
    settings = Settings(env="dev", data_dir=tmp_path / "platform", provider_timeout_seconds=10)
    with ProviderClient(settings) as provider_client:
        yield provider_client


def _target(base_url: str, credential: str = CREDENTIAL) -> DispatchTarget:
    return DispatchTarget(
        connection_id="pcon_sdk", base_url=base_url, credential=credential, approved=False
    )


def test_sdk_provider_passes_all_nine_checks(provider_process, client):
    provider_process.start()
    report = run_conformance(client, _target(provider_process.base_url))
    assert [check.status for check in report.checks] == ["passed"] * 9, report.to_json()
    assert report.passed
    # The one real call ran the handler once; replay, conflict and reconciliation did not.
    assert provider_process.runs() == 1


def test_artifact_provider_rejecting_the_junk_payload_passes(provider_process, client, tmp_path):
    provider_process.start("--strict", "--blobs", str(tmp_path / "blobs"))
    report = run_conformance(client, _target(provider_process.base_url))
    assert report.passed, report.to_json()
    execution = next(c for c in report.checks if c.name == "execution_envelope_valid")
    assert execution.detail["outcome"] == "DEFINED_FAILURE"
    assert execution.detail["errorCode"] == "MEANINGLESS_PAYLOAD"
    assert provider_process.runs() == 1
    # The artifacts route is there, and credentialed.
    unknown = f"{provider_process.base_url}/v1/artifacts/{'0' * 64}"
    assert httpx.get(unknown, timeout=10).status_code == 401
    assert httpx.get(unknown, headers=AUTH, timeout=10).status_code == 404


def test_wrong_credential_at_the_platform_fails_the_checks_that_need_it(provider_process, client):
    provider_process.start()
    report = run_conformance(client, _target(provider_process.base_url, "not-the-credential"))
    statuses = {check.name: check.status for check in report.checks}
    assert statuses["liveness"] == "passed"
    assert statuses["readiness"] == "passed"
    assert not report.passed
    assert provider_process.runs() == 0
