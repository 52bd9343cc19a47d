"""mercato.client against a real `mercato serve` and a real SDK provider on 127.0.0.1."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from builders.client_platform import CALLER, SERVICE, Platform, TamperingProxy
from builders.event_loops import run_on_fresh_loop
from builders.platform_process import Worker, mercato
from mercato.client import (
    ArtifactCorrupted,
    ArtifactDigestMismatch,
    AsyncMercatoClient,
    InvocationResult,
    MercatoClient,
    ProviderDefinedFailure,
    RetryPolicy,
)

pytestmark = pytest.mark.functional

PATIENT = RetryPolicy(
    network_retries=60,
    backoff_base=0.05,
    backoff_cap=0.25,
    max_wait_seconds=90.0,
    poll_interval=0.1,
    poll_cap=0.5,
)


def invoke_path(method: str, path: str) -> bool:
    return method == "POST" and path.endswith(":invoke")


def test_a_response_dropped_after_the_provider_call_is_retried_under_the_same_key(
    platform: Platform,
) -> None:
    platform.start()
    proxy = TamperingProxy(platform.url)
    proxy.drop_response_once(invoke_path)
    try:
        with MercatoClient(proxy.url, platform.api_key, retry=PATIENT) as client:
            result = client.invoke(SERVICE, "v1", {"n": 7})
            receipts = list(client.iter_receipts())
            balance = client.balance()
    finally:
        proxy.close()

    assert proxy.dropped == 1
    assert [m for m, p in proxy.forwarded if invoke_path(m, p)] == ["POST", "POST"]
    assert result.result == {"echo": {"n": 7}}
    assert platform.provider.runs() == 1  # the business ran once
    assert (balance.available, balance.reserved) == (90, 0)  # exactly one charge
    (receipt,) = receipts
    assert (receipt.invocation_id, receipt.idempotency_key) == (
        result.invocation_id,
        result.idempotency_key,
    )
    assert (receipt.settlement, receipt.actual_spend) == ("SETTLED", 10)
    assert platform.ledger_balanced()


def test_serve_killed_after_the_provider_call_then_restarted_charges_once(
    platform: Platform,
) -> None:
    doomed = platform.start(failpoints="after-send")
    outcome: dict[str, Any] = {}
    restarted = threading.Event()

    def sleep(seconds: float) -> None:
        # A retry while the platform is down waits for the restart (a condition, bounded),
        # not for a guessed time; afterwards Retry-After and polling waits are real.
        if not restarted.wait(120):
            raise AssertionError("the platform was never restarted")
        time.sleep(seconds)

    def call() -> None:
        try:
            with MercatoClient(
                platform.url, platform.api_key, retry=PATIENT, sleep=sleep
            ) as client:
                outcome["result"] = client.invoke(SERVICE, "v1", {"n": 3})
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    assert doomed.process.wait(30) == -signal.SIGKILL  # died after sending to the provider
    doomed.stop()
    assert platform.provider.runs() == 1

    platform.start()  # same address: the client's retries reach the new process
    worker = Worker(platform.env, platform.logs / "worker.log")
    restarted.set()
    try:
        caller.join(90)
    finally:
        worker.stop()

    assert not caller.is_alive()
    assert "error" not in outcome, outcome.get("error")
    result: InvocationResult = outcome["result"]
    assert result.result == {"echo": {"n": 3}}
    assert platform.provider.runs() == 1
    assert platform.balances() == (90, 0)
    with MercatoClient(platform.url, platform.api_key) as client:
        (receipt,) = list(client.iter_receipts())
    assert receipt.idempotency_key == result.idempotency_key
    assert (receipt.settlement, receipt.actual_spend) == ("SETTLED", 10)
    assert platform.ledger_balanced()


# Store-agnostic (decision 0390): the client's side, not the store's, is under test here.
@pytest.mark.sqlite_only
def test_a_429_is_waited_out_with_the_real_retry_after(platform: Platform) -> None:
    quota = mercato(
        "admin",
        "set-quota",
        CALLER,
        "--policy",
        "tiny",
        "--limit",
        "1",
        "--window-seconds",
        "2",
        env=platform.env,
    )
    assert quota.returncode == 0, quota.stderr
    platform.start()
    waits: list[float] = []
    reasons: list[str] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)  # the wait is the behaviour under test; bounded below

    policy = RetryPolicy(max_wait_seconds=3.0)
    results = []
    with MercatoClient(
        platform.url, platform.api_key, retry=policy, sleep=sleep, progress=reasons.append
    ) as client:
        # Back-to-back calls under 1 per 2 s: the second is limited unless the first straddled
        # a window boundary, so call until one was limited and waited out (at most five calls).
        for n in range(5):
            results.append(client.invoke(SERVICE, "v1", {"n": n}))
            if reasons:
                break
        balance = client.balance()

    assert [r.result for r in results] == [{"echo": {"n": n}} for n in range(len(results))]
    assert len({r.idempotency_key for r in results}) == len(results)
    assert reasons and all("rate limited" in r for r in reasons)
    assert 0 < sum(waits) <= 3.0
    assert (balance.available, balance.reserved) == (100 - 10 * len(results), 0)
    assert platform.provider.runs() == len(results)


def _artifact_call(platform: Platform, client: MercatoClient) -> InvocationResult:
    result = client.invoke(SERVICE, "v1", {"artifact": "a thumbnail's bytes"})
    platform.run_worker_once()  # pulls the artifact into the platform's blob store
    return result


# Store-agnostic (decision 0390): the client's side, not the store's, is under test here.
@pytest.mark.sqlite_only
def test_an_artifact_downloads_verified_and_a_corrupted_one_raises_leaving_no_file(
    platform: Platform, tmp_path: Path
) -> None:
    platform.start()
    out = tmp_path / "out"
    with MercatoClient(platform.url, platform.api_key, retry=PATIENT) as client:
        call = _artifact_call(platform, client)
        (entry,) = call.artifacts
        assert entry.digest == hashlib.sha256(b"a thumbnail's bytes").hexdigest()
        saved = client.download_artifacts(call.invocation_id, call.artifacts, out)
        assert [p.read_bytes() for p in saved] == [b"a thumbnail's bytes"]

        (blob,) = [p for p in platform.blobs.rglob(entry.digest) if p.is_file()]
        blob.write_bytes(b"rotted on disk")
        with pytest.raises(ArtifactCorrupted) as caught:
            client.download_artifact(call.invocation_id, entry.artifact_id, out / "again.txt")

    assert (caught.value.status, caught.value.code) == (500, "ARTIFACT_CORRUPTED")
    assert sorted(p.name for p in out.iterdir()) == [saved[0].name]


# Store-agnostic (decision 0390): the client's side, not the store's, is under test here.
@pytest.mark.sqlite_only
def test_bytes_altered_in_transit_fail_the_clients_own_digest_check(
    platform: Platform, tmp_path: Path
) -> None:
    platform.start()
    proxy = TamperingProxy(platform.url)
    proxy.corrupt_bodies(lambda method, path: "/artifacts/" in path)
    out = tmp_path / "out"
    out.mkdir()
    try:
        with MercatoClient(proxy.url, platform.api_key, retry=PATIENT) as client:
            call = _artifact_call(platform, client)
            (entry,) = call.artifacts
            with pytest.raises(ArtifactDigestMismatch) as caught:
                client.download_artifact(call.invocation_id, entry.artifact_id, out / "t.txt")
    finally:
        proxy.close()

    assert caught.value.expected == entry.digest
    assert list(out.iterdir()) == []


# Store-agnostic (decision 0390): the client's side, not the store's, is under test here.
@pytest.mark.sqlite_only
def test_a_defined_failure_is_typed_and_spends_nothing(platform: Platform) -> None:
    platform.start()
    with MercatoClient(platform.url, platform.api_key) as client:
        with pytest.raises(ProviderDefinedFailure) as caught:
            client.invoke(SERVICE, "v1", {"fail": "NO_SUCH_CHART"})
        balance = client.balance()

    assert caught.value.error_code == "NO_SUCH_CHART"
    assert caught.value.provider_http_status == 422
    assert (balance.available, balance.reserved) == (100, 0)


# Store-agnostic (decision 0390): the client's side, not the store's, is under test here.
@pytest.mark.sqlite_only
def test_the_async_client_reads_the_catalog_invokes_and_reads_its_receipt(
    platform: Platform,
) -> None:
    platform.start()

    async def session() -> dict[str, Any]:
        async with AsyncMercatoClient(platform.url, platform.api_key) as client:
            listings = [item async for item in client.iter_listings(page_size=1)]
            listing = await client.get_listing(SERVICE)
            version = await client.get_version(SERVICE, "v1")
            contract = await client.get_contract(SERVICE, "v1")
            call = await client.invoke(SERVICE, "v1", {"n": 5}, idempotency_key="async-1")
            replay = await client.invoke(SERVICE, "v1", {"n": 5}, idempotency_key="async-1")
            receipt = await client.get_receipt(call.invocation_id)
            quota = await client.rate_limit()
            balance = await client.balance()
        return {
            "listings": listings,
            "listing": listing,
            "version": version,
            "contract": contract,
            "call": call,
            "replay": replay,
            "receipt": receipt,
            "quota": quota,
            "balance": balance,
        }

    seen = run_on_fresh_loop(session())

    assert [item.service_code for item in seen["listings"]] == [SERVICE]
    assert seen["listing"].versions[0].price == 10
    assert seen["version"].contract_digest == seen["contract"].contract_digest
    assert seen["contract"].has_artifact_contract is True
    assert seen["contract"].result_schema == {"type": "object", "required": ["echo"]}
    assert seen["call"].result == seen["replay"].result == {"echo": {"n": 5}}
    assert seen["receipt"].idempotency_key == "async-1"
    assert (seen["receipt"].settlement, seen["receipt"].channel) == ("SETTLED", "API_KEY")
    assert seen["quota"].accepted == 1
    assert (seen["balance"].available, seen["balance"].reserved) == (90, 0)
