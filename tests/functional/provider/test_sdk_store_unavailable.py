"""With the store gone, reconciliation and execution of an unknown key are UNKNOWN_OUTCOME."""

from __future__ import annotations

import shutil

import httpx
import pytest

from builders.provider import AUTH, drop_postgres_database
from builders.provider_process import ProviderProcess

pytestmark = pytest.mark.functional


def test_unavailable_store_answers_unknown_for_an_unknown_key(disposable_store_url, tmp_path):
    provider = ProviderProcess(store=disposable_store_url, workdir=tmp_path)
    provider.start()
    try:
        base = provider.base_url
        assert httpx.get(f"{base}/health/ready", timeout=10).status_code == 200
        healthy = httpx.post(
            f"{base}/v1/reconciliations",
            json={"providerIdempotencyKey": "never-seen"},
            headers=AUTH,
            timeout=10,
        )
        assert healthy.status_code == 503
        assert healthy.json()["outcome"] == "RETRYABLE_BEFORE_ACCEPT"

        if disposable_store_url.startswith("sqlite"):
            shutil.move(tmp_path / "provider", tmp_path / "moved-away")
        else:
            drop_postgres_database(disposable_store_url)

        response = httpx.post(
            f"{base}/v1/reconciliations",
            json={"providerIdempotencyKey": "never-seen"},
            headers=AUTH,
            timeout=30,
        )
        assert response.status_code == 202
        assert response.json()["outcome"] == "UNKNOWN_OUTCOME"
        assert httpx.get(f"{base}/health/ready", timeout=30).status_code == 503
        assert httpx.get(f"{base}/health/live", timeout=10).status_code == 200
        execution = httpx.post(
            f"{base}/v1/executions",
            json={"payload": {"a": 1}},
            headers={**AUTH, "Idempotency-Key": "new-key"},
            timeout=30,
        )
        # The store cannot say whether an earlier request accepted this key, so the SDK cannot
        # prove the handler never started for it: UNKNOWN_OUTCOME (issue 19 item 5).
        assert execution.status_code == 202
        assert execution.json()["outcome"] == "UNKNOWN_OUTCOME"
        assert provider.runs() == 0
    finally:
        provider.stop()
