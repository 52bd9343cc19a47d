"""Every `limit` the published example advertises settles end to end; one above consumes nothing.

The example provider runs as its own process (`mercato daily-ranking serve`) over the sample
upstream on loopback; the platform is the ASGI app on the test's store (decision 0205).
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, make_account, make_api_key
from builders.catalog import SERVICE_CODE, approve_connection, publish
from builders.daily_ranking import env_for, free_port, running_sample, settings_for, wait_for
from builders.platform_process import probe
from mercato.catalog.examples import example_contract
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.web.app import create_app
from mercato_examples.daily_ranking.provider import DailyRanking
from mercato_examples.daily_ranking.sample_upstream import DEFAULT_SIZES

pytestmark = pytest.mark.functional

CREDENTIAL = "limits-test-credential-0123456789"
INVOKE = f"/v1/services/{SERVICE_CODE}/versions/v1:invoke"
CONTRACT = f"/v1/catalog/listings/{SERVICE_CODE}/versions/v1/contract"
PRICE = 10
POINTS = 100


def _ready(base: str) -> bool | None:
    try:
        return probe().get(f"{base}/health/ready", timeout=2).status_code == 200 or None
    except httpx.HTTPError:
        return None


@pytest.fixture(scope="module")
def ranking_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example provider process, its three charts refreshed from the sample beforehand."""
    data_dir = tmp_path_factory.mktemp("ranking")
    with running_sample() as sample:
        refresher = DailyRanking(settings_for(sample, data_dir))
        assert {r.status for r in refresher.refresh()} == {"created"}
        refresher.close()
        env = env_for(sample.base, sample.host_port, data_dir, CREDENTIAL)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "mercato", "daily-ranking", "serve", "--port", str(port)],
            env=env | {"MERCATO_DAILY_RANKING_REFRESH_INTERVAL_SECONDS": "3600"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _ready(base), what="daily-ranking provider")
            yield base
        finally:
            process.terminate()
            process.wait(timeout=20)


@pytest.fixture
def platform(runtime: Runtime, ranking_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The packaged example published on the provider process; a caller's key with 100 points."""
    owner = make_account(runtime.db, "provider@example.com", password=None)
    with runtime.db.transaction() as session:
        connection_id = providers.create_connection(
            session,
            owner_id=owner,
            name="daily-ranking",
            base_url=ranking_url,
            credential=CREDENTIAL,
            settings=runtime.settings,
            now=runtime.clock.now(),
        ).id
    approve_connection(runtime, connection_id)
    publish(runtime, connection_id, price=PRICE, contract=example_contract())
    caller = make_account(runtime.db, "caller@example.com", password=None)
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=caller, amount=POINTS, now=runtime.clock.now())
    key, _ = make_api_key(runtime.db, caller)
    client = ProviderClient(runtime.settings)
    app = create_app(dataclasses.replace(runtime, provider=client))
    with TestClient(app, raise_server_exceptions=False) as http:
        yield http, bearer(key)
    client.close()


def _largest_limit(http: TestClient) -> int:
    """The largest `limit` the published contract admits, read from its request schema."""
    schema = http.get(CONTRACT).json()["requestSchema"]
    largest: int = schema["properties"]["limit"]["maximum"]
    return largest


def _consumed(http: TestClient, auth: dict[str, str]) -> dict[str, Any]:
    """Everything a call may consume: points, quota and receipts."""
    return {
        "balance": http.get("/v1/balance", headers=auth).json(),
        "accepted": http.get("/v1/rate-limit", headers=auth).json()["accepted"],
        "receipts": len(http.get("/v1/invocations", headers=auth).json()["items"]),
    }


def test_every_chart_at_its_largest_limit_settles_and_is_charged_once(
    platform: tuple[TestClient, dict[str, str]],
) -> None:
    http, auth = platform
    largest = _largest_limit(http)
    assert largest == 500  # DESIGN §11

    for charged, chart in enumerate(("overall", "illust", "manga"), start=1):
        payload = {"chart": chart, "limit": largest}
        headers = {**auth, "Idempotency-Key": f"largest-{chart}"}
        answer = http.post(INVOKE, json=payload, headers=headers)

        assert answer.status_code == 200, answer.text[:500]
        body = answer.json()
        expected = min(largest, DEFAULT_SIZES[chart])
        assert len(body["result"]["entries"]) == len(body["artifacts"]) == expected
        receipt = http.get(f"/v1/invocations/{body['invocationId']}", headers=auth).json()
        assert (receipt["settlement"], receipt["actualSpend"]) == ("SETTLED", PRICE)
        replay = http.post(INVOKE, json=payload, headers=headers)
        assert replay.status_code == 200 and replay.content == answer.content
        balance = http.get("/v1/balance", headers=auth).json()
        assert balance == {"available": POINTS - PRICE * charged, "reserved": 0}

        last = body["artifacts"][-1]  # downloadable at once (decision 0206)
        path = f"/v1/invocations/{body['invocationId']}/artifacts/{last['artifactId']}"
        download = http.get(path, headers=auth)
        assert download.status_code == 200
        assert hashlib.sha256(download.content).hexdigest() == last["digest"]

    assert _consumed(http, auth)["receipts"] == 3


def test_one_above_the_largest_limit_is_refused_with_nothing_consumed(
    platform: tuple[TestClient, dict[str, str]],
) -> None:
    http, auth = platform
    above = _largest_limit(http) + 1
    before = _consumed(http, auth)

    for chart in ("overall", "illust", "manga"):
        headers = {**auth, "Idempotency-Key": f"above-{chart}"}
        refused = http.post(INVOKE, json={"chart": chart, "limit": above}, headers=headers)

        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["code"] == "REQUEST_SCHEMA_VIOLATION"
        assert [e["pointer"] for e in problem["errors"]] == ["/limit"]
        assert "invocationId" not in problem

    assert _consumed(http, auth) == before
    # Nor was the Idempotency-Key taken: the same key now carries a valid call.
    fine = http.post(
        INVOKE,
        json={"chart": "manga", "limit": 1},
        headers={**auth, "Idempotency-Key": "above-manga"},
    )
    assert fine.status_code == 200, fine.text
