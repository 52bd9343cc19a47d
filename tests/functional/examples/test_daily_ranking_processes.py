"""The example provider and sample upstream as real processes, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.daily_ranking import control, env_for, free_port, wait_for
from builders.platform_process import probe

pytestmark = pytest.mark.functional

CREDENTIAL = "functional-test-credential-0123456789"


def _mercato(*args: str) -> list[str]:
    return [sys.executable, "-m", "mercato", *args]


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _answer_or_none(get: Any) -> Any:
    try:
        response = get()
    except httpx.TransportError:
        return None
    return response if response.status_code == 200 else None


@pytest.fixture
def sample_base() -> Iterator[str]:
    """`mercato sample-upstream serve` as its own process; yields its base URL."""
    port = free_port()
    process = subprocess.Popen(
        _mercato("sample-upstream", "serve", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answer_or_none(lambda: probe().get(f"{base}/_control")), what="sample")
        yield base
    finally:
        _stop(process)


@pytest.fixture
def env(sample_base: str, tmp_path: Path) -> dict[str, str]:
    return env_for(sample_base, sample_base.removeprefix("http://"), tmp_path / "var", CREDENTIAL)


def _refresh(env: dict[str, str], chart: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        _mercato("daily-ranking", "refresh", "--chart", chart, "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def test_refresh_exits_non_zero_only_when_a_refresh_failed(
    env: dict[str, str], sample_base: str
) -> None:
    code, out = _refresh(env, "manga")
    assert code == 0
    assert out["charts"] == [
        {
            "chart": "manga",
            "status": "created",
            "snapshotId": "manga-20260519",
            "date": "20260519",
            "reason": "",
        }
    ]

    code, out = _refresh(env, "manga")
    assert (code, out["ok"], out["charts"][0]["status"]) == (0, True, "unchanged")

    control(sample_base, advanceDays=1, fail="http_500")
    code, out = _refresh(env, "manga")
    assert (code, out["ok"]) == (1, False)
    assert out["charts"][0]["status"] == "failed"
    assert out["charts"][0]["snapshotId"] == "manga-20260519"

    control(sample_base, fail=None)
    code, out = _refresh(env, "manga")
    assert (code, out["charts"][0]["snapshotId"]) == (0, "manga-20260520")


class Provider:
    """A client for the provider process's endpoints."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=30)

    def execute(
        self,
        payload: Any,
        *,
        key: str | None = None,
        credential: str | None = CREDENTIAL,
        raw: bytes | None = None,
    ) -> httpx.Response:
        headers = {
            "Idempotency-Key": key or f"test-{uuid.uuid4().hex}",
            "Content-Type": "application/json",
        }
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential}"
        body = raw if raw is not None else json.dumps({"payload": payload}).encode()
        return self.http.post("/v1/executions", content=body, headers=headers)

    def succeeded(self, payload: Any) -> dict[str, Any] | None:
        envelope = self.execute(payload).json()
        return envelope if envelope["outcome"] == "SUCCEEDED" else None


@pytest.fixture
def provider(env: dict[str, str]) -> Iterator[Provider]:
    """`mercato daily-ranking serve`: the SDK app plus its scheduled refresher."""
    port = free_port()
    serve_env = env | {"MERCATO_DAILY_RANKING_REFRESH_INTERVAL_SECONDS": "3600"}
    process = subprocess.Popen(
        _mercato("daily-ranking", "serve", "--port", str(port)),
        env=serve_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    client = Provider(f"http://127.0.0.1:{port}")
    try:
        wait_for(lambda: _answer_or_none(lambda: client.http.get("/health/ready")), what="ready")
        yield client
    finally:
        client.http.close()
        _stop(process)


def test_the_served_provider_answers_from_its_snapshots(
    provider: Provider, env: dict[str, str], sample_base: str
) -> None:
    # The scheduled refresher fetches every chart at start; until then: NO_SNAPSHOT_YET.
    envelope = wait_for(
        lambda: provider.succeeded({"chart": "manga", "limit": 5}),
        timeout=120,
        what="first snapshot",
    )
    result = envelope["result"]
    assert (result["snapshotId"], result["date"]) == ("manga-20260519", "2026-05-19")
    assert len(result["entries"]) == len(result["artifacts"]) == 5

    for artifact in result["artifacts"]:
        download = provider.http.get(
            f"/v1/artifacts/{artifact['digest']}", headers={"Authorization": f"Bearer {CREDENTIAL}"}
        )
        assert download.status_code == 200
        assert hashlib.sha256(download.content).hexdigest() == artifact["digest"]
        assert len(download.content) == artifact["size"]

    assert provider.execute({"chart": "manga"}, credential=None).status_code == 401
    assert provider.execute({"chart": "manga"}, credential="wrong").status_code == 401

    wait_for(lambda: provider.succeeded({"chart": "overall"}), timeout=120, what="overall")
    first = provider.execute({"chart": "overall", "limit": 3}, key="k-replay")
    again = provider.execute({"chart": "overall", "limit": 3}, key="k-replay")
    other_key = provider.execute({"chart": "overall", "limit": 3})
    assert first.status_code == 200 and first.content == again.content
    assert other_key.json()["result"] == first.json()["result"]

    junk = provider.execute({"platformConformanceProbe": "x"})
    assert junk.status_code == 400
    assert junk.json() | {"correlationId": ""} == {
        "outcome": "DEFINED_FAILURE",
        "errorCode": "INVALID_CHART",
        "httpStatus": 400,
        "correlationId": "",
    }
    extra = provider.execute(None, raw=b'{"payload": {"chart": "manga"}, "extra": 1}')
    assert extra.status_code == 400


def test_a_refresh_from_another_process_is_served_and_a_failed_one_keeps_the_snapshot(
    provider: Provider, env: dict[str, str], sample_base: str
) -> None:
    wait_for(lambda: provider.succeeded({"chart": "illust"}), timeout=120, what="snapshot")

    control(sample_base, advanceDays=1)
    assert _refresh(env, "illust")[0] == 0
    latest = provider.succeeded({"chart": "illust", "limit": 2})
    assert latest is not None and latest["result"]["snapshotId"] == "illust-20260520"

    control(sample_base, advanceDays=1, fail="thumbnail_404")
    assert _refresh(env, "illust")[0] == 1
    kept = provider.succeeded({"chart": "illust", "limit": 2})
    assert kept is not None and kept["result"] == latest["result"]


def test_the_served_provider_passes_all_nine_conformance_checks(provider: Provider) -> None:
    from mercato.conformance.runner import run_conformance
    from mercato.dispatch.client import ProviderClient
    from mercato.providers.schemas import DispatchTarget
    from mercato.settings import Settings

    client = ProviderClient(Settings(env="dev"))
    target = DispatchTarget("conn_example", provider.base, CREDENTIAL, approved=False)

    report = run_conformance(client, target, timeout=30)

    assert report.passed, report.to_json()
    assert len(report.checks) == 9


def test_serve_refuses_to_start_without_a_credential_outside_dev(
    env: dict[str, str],
) -> None:
    production = {k: v for k, v in env.items() if k != "MERCATO_DAILY_RANKING_CREDENTIAL"}
    production["MERCATO_ENV"] = "production"

    done = subprocess.run(
        _mercato("daily-ranking", "serve", "--port", str(free_port())),
        env=production,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert "MERCATO_DAILY_RANKING_CREDENTIAL" in done.stderr
