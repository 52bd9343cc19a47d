"""The acceptance table: broken providers over real HTTP on 127.0.0.1, one verdict row each."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from builders.providers import CREDENTIAL, Faults, reference_provider
from mercato.conformance.runner import run_conformance
from mercato.dispatch.client import ProviderClient
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

P, F, S = "passed", "failed", "skipped"

# (case, faults, expected statuses of checks 1..9)
TABLE: list[tuple[str, Faults, tuple[str, ...]]] = [
    ("correct provider, junk answered SUCCEEDED", Faults(), (P, P, P, P, P, P, P, P, P)),
    (
        "correct provider, junk answered DEFINED_FAILURE",
        Faults(junk_answer="defined_failure"),
        (P, P, P, P, P, P, P, P, P),
    ),
    ("dead /health/live", Faults(live_status=500), (F, P, P, P, P, P, P, P, P)),
    ("dead /health/ready", Faults(ready_status=503), (P, F, P, P, P, P, P, P, P)),
    (
        "no credential accepted",
        Faults(accept_missing_credential=True),
        (P, P, F, P, P, P, P, P, P),
    ),
    (
        "wrong credential accepted",
        Faults(accept_wrong_credential=True),
        (P, P, F, P, P, P, P, P, P),
    ),
    (
        "outcome/status mismatch (SUCCEEDED with HTTP 500)",
        Faults(status_mismatch=True),
        (P, P, P, F, S, S, P, S, P),
    ),
    (
        "execution broken (plain 500)",
        Faults(execution_broken=True),
        (P, P, P, F, S, S, P, S, P),
    ),
    (
        "execution undetermined (UNKNOWN_OUTCOME is valid but does not work)",
        Faults(junk_answer="unknown_outcome"),
        (P, P, P, P, S, S, P, S, P),
    ),
    ("unstable replay", Faults(unstable_replay=True), (P, P, P, P, F, P, P, P, P)),
    (
        "conflict not 409 (stored answer replayed)",
        Faults(conflict_replays_stored=True),
        (P, P, P, P, P, F, P, P, P),
    ),
    ("extra field accepted", Faults(accept_unknown_fields=True), (P, P, P, P, P, P, F, P, P)),
    (
        "known key not found (RETRYABLE_BEFORE_ACCEPT)",
        Faults(known_key_answer="retryable"),
        (P, P, P, P, P, P, P, F, P),
    ),
    (
        "known key answered UNKNOWN_OUTCOME",
        Faults(known_key_answer="unknown"),
        (P, P, P, P, P, P, P, F, P),
    ),
    (
        "known key answered a different DEFINED_FAILURE",
        Faults(known_key_answer="defined_failure"),
        (P, P, P, P, P, P, P, F, P),
    ),
    (
        "unknown key answered SUCCEEDED",
        Faults(unknown_key_succeeds=True),
        (P, P, P, P, P, P, P, P, F),
    ),
]

NAMES = [
    "liveness",
    "readiness",
    "execution_requires_credential",
    "execution_envelope_valid",
    "replay_is_stable",
    "fingerprint_conflict",
    "unknown_envelope_field_rejected",
    "known_key_reconciles",
    "unknown_key_does_not_claim_success",
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderClient]:
    settings = Settings(
        env="dev", data_dir=tmp_path_factory.mktemp("d"), provider_timeout_seconds=5
    )
    with ProviderClient(settings) as provider_client:
        yield provider_client


def target_for(url: str, credential: str = CREDENTIAL) -> DispatchTarget:
    return DispatchTarget(
        connection_id="pcon_test", base_url=url, credential=credential, approved=False
    )


@pytest.mark.parametrize(("case", "faults", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_each_broken_provider_gets_exactly_its_verdict_row(
    client: ProviderClient, case: str, faults: Faults, expected: tuple[str, ...]
) -> None:
    with reference_provider(faults) as provider:
        report = run_conformance(client, target_for(provider.url))

    assert [c.name for c in report.checks] == NAMES
    assert [c.position for c in report.checks] == list(range(1, 10))
    assert tuple(c.status for c in report.checks) == expected, report.to_json()
    assert report.passed is (expected == (P,) * 9)


def test_unreachable_provider_fails_every_check_that_needs_an_answer(
    client: ProviderClient,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port any more: every call is a connect error.
    report = run_conformance(client, target_for(f"http://127.0.0.1:{port}"))
    assert tuple(c.status for c in report.checks) == (F, F, F, F, S, S, F, S, F)
    assert report.checks[0].detail["error"] == "connect"


def test_calls_use_conformance_keys_and_meaningless_payload(client: ProviderClient) -> None:
    with reference_provider() as provider:
        run_conformance(client, target_for(provider.url))
        seen = provider.seen

    executions = [s for s in seen if s.path == "/v1/executions"]
    reconciliations = [s for s in seen if s.path == "/v1/reconciliations"]
    assert len(executions) == 6 and len(reconciliations) == 2
    for request in executions:
        assert request.headers["Idempotency-Key"].startswith("platform-conformance:")
        assert set(json.loads(request.body)["payload"]) == {"platformConformanceProbe"}
    for request in reconciliations:
        assert json.loads(request.body)["providerIdempotencyKey"].startswith(
            "platform-conformance:"
        )
    # The real call, its replay, its conflict and its reconciliation share one key.
    real_key = executions[2].headers["Idempotency-Key"]
    assert [s.headers["Idempotency-Key"] for s in executions[3:5]] == [real_key, real_key]
    assert json.loads(reconciliations[0].body)["providerIdempotencyKey"] == real_key
    # Health probes carry no credential; the credential check sends none and then a wrong one.
    assert all("Authorization" not in s.headers for s in seen if s.method == "GET")
    assert "Authorization" not in executions[0].headers
    assert executions[1].headers["Authorization"] != f"Bearer {CREDENTIAL}"


def test_evidence_never_contains_the_credential(client: ProviderClient) -> None:
    for faults in (Faults(), Faults(execution_broken=True), Faults(accept_wrong_credential=True)):
        with reference_provider(faults) as provider:
            report = run_conformance(client, target_for(provider.url))
        text = json.dumps(report.to_json())
        assert CREDENTIAL not in text
        assert "latencyMs" in text


def test_the_credential_check_reads_as_the_platforms_probe_of_401(
    client: ProviderClient,
) -> None:
    """Check 3's evidence says what the platform sent and what it expected, so a refusal reads
    as the provider doing its job and an acceptance names the probe it failed to refuse."""
    with reference_provider() as provider:
        passing = run_conformance(client, target_for(provider.url)).checks[2].detail
    assert passing["expectedStatus"] == 401
    assert passing["probeWithoutCredential"]["status"] == 401
    assert passing["probeWithInvalidCredential"]["status"] == 401
    assert "refused both with 401, as required" in passing["summary"]
    assert "wrongCredential" not in passing
    with reference_provider(Faults(accept_wrong_credential=True)) as provider:
        failing = run_conformance(client, target_for(provider.url)).checks[2].detail
    assert failing["probeWithInvalidCredential"]["status"] != 401
    assert "did not refuse the probe with a deliberately invalid credential" in failing["summary"]
    assert "without a credential (" not in failing["summary"]
