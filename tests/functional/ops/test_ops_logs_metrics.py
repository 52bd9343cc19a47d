"""A real `mercato serve` (production settings, JSON logs on stderr) in front of a real SDK
provider on 127.0.0.1: no secret in any log line of a full invoke, the request id reaches the
provider call's line, and `/metrics` exposes the operations series after a few calls."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.ops import (
    CALLER_EMAIL,
    CALLER_PASSWORD,
    PROVIDER_CREDENTIAL,
    SERVICE,
    build_ops_world,
    start_echo_provider,
)
from builders.platform_process import Serve, free_port, platform_env, probe, wait_for
from mercato.settings import Settings

# Log lines and metrics across processes do not depend on the store (decision 0390).
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]

SECRET_KEY = "ops-test-secret-key-0123456789abcdefghijkl"
REQUEST_ID = "ops-test-request-0001"
INVOKE = f"/v1/services/{SERVICE}/versions/v1:invoke"


def _production_env(db_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    return platform_env(
        db_url,
        data_dir,
        MERCATO_ENV="production",
        MERCATO_SECRET_KEY=SECRET_KEY,
        MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES="true",
        MERCATO_PROVIDER_TIMEOUT_SECONDS="10",
        **extra,
    )


def _settings(db_url: str, data_dir: Path) -> Settings:
    return Settings(
        env="production",
        secret_key=SECRET_KEY,  # type: ignore[arg-type]
        database_url=db_url,
        data_dir=data_dir,
        allow_private_provider_addresses=True,
    )


def _lines(log: Path) -> list[dict[str, Any]]:
    parsed = []
    for raw in log.read_text().splitlines():
        if raw.strip():
            parsed.append(json.loads(raw))  # every line is one JSON object
    return parsed


def _sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one exposed sample (exact label set), or fail."""
    for line in metrics.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    raise AssertionError(f"{name}{labels} not exposed")


def test_full_invoke_logs_no_secret_and_carries_the_request_id(db_url: str, tmp_path: Path) -> None:
    provider = start_echo_provider(tmp_path / "provider")
    data_dir = tmp_path / "data"
    log = tmp_path / "serve.log"
    try:
        build_ops_world(_settings(db_url, data_dir), provider.base_url)
        serve = Serve(_production_env(db_url, data_dir, MERCATO_DEFAULT_QUOTA_LIMIT="2"), log)
        try:
            with httpx.Client(base_url=serve.url, timeout=30) as http:
                pair = http.post(
                    "/v1/auth/login", json={"email": CALLER_EMAIL, "password": CALLER_PASSWORD}
                ).json()
                session = {"Authorization": f"Bearer {pair['accessToken']}"}
                created = http.post("/v1/api-keys", json={"name": "ops"}, headers=session)
                api_key = created.json()["apiKey"]
                refreshed = http.post(
                    "/v1/auth/refresh", json={"refreshToken": pair["refreshToken"]}
                ).json()
                caller = {"Authorization": f"Bearer {api_key}"}
                ok = http.post(
                    INVOKE,
                    json={"n": 1},
                    headers={**caller, "Idempotency-Key": "k1", "X-Request-Id": REQUEST_ID},
                )
                failed = http.post(
                    INVOKE, json={"fail": "NOPE"}, headers={**caller, "Idempotency-Key": "k2"}
                )
                limited = http.post(
                    INVOKE, json={"n": 3}, headers={**caller, "Idempotency-Key": "k3"}
                )
                bogus = "mercato_live_" + "x" * 40
                refused = http.get("/v1/balance", headers={"Authorization": f"Bearer {bogus}"})
                odd_id = http.get("/health/live", headers={"X-Request-Id": "bad id\twith tab"})
                metrics = http.get("/metrics")
        finally:
            serve.stop()
    finally:
        provider.stop()

    assert ok.status_code == 200, ok.text
    assert ok.headers["x-request-id"] == REQUEST_ID
    assert (failed.status_code, failed.json()["code"]) == (422, "PROVIDER_DEFINED_FAILURE")
    assert (limited.status_code, limited.json()["code"]) == (429, "RATE_LIMIT_EXCEEDED")
    assert refused.status_code == 401
    generated_id = odd_id.headers["x-request-id"]
    assert generated_id != "bad id\twith tab" and generated_id.startswith("req_")

    lines = _lines(log)
    text = log.read_text()
    secrets = {
        "api key": api_key,
        "access token": pair["accessToken"],
        "refresh token": pair["refreshToken"],
        "rotated access token": refreshed["accessToken"],
        "rotated refresh token": refreshed["refreshToken"],
        "provider credential": PROVIDER_CREDENTIAL,
        "secret key": SECRET_KEY,
        "password": CALLER_PASSWORD,
        "refused token": bogus,
    }
    for what, secret in secrets.items():
        assert secret not in text, f"the {what} appears in a log line"
    assert all({"ts", "level", "logger", "msg", "request_id"} <= set(line) for line in lines)

    mine = [line for line in lines if line["request_id"] == REQUEST_ID]
    request_lines = [line for line in mine if line["msg"] == "request"]
    provider_lines = [line for line in mine if line["msg"] == "provider call"]
    assert len(request_lines) == 1
    assert request_lines[0]["status"] == 200 and request_lines[0]["outcome"] == "succeeded"
    assert len(provider_lines) == 1
    assert provider_lines[0]["operation"] == "execute"
    assert provider_lines[0]["provider_status"] == 200
    assert any(line["request_id"] == generated_id for line in lines)

    body = metrics.text
    assert metrics.status_code == 200
    assert _sample(body, "mercato_invokes_total", outcome="succeeded", settlement="SETTLED") == 1
    assert _sample(body, "mercato_invokes_total", outcome="failed", settlement="RELEASED") == 1
    assert _sample(body, "mercato_invokes_total", outcome="rejected", settlement="NONE") == 1
    assert _sample(body, "mercato_quota_rejections_total") == 1
    assert _sample(body, "mercato_invoke_duration_seconds_count", outcome="succeeded") == 1
    assert (
        _sample(
            body, "mercato_provider_call_duration_seconds_count", operation="execute", result="2xx"
        )
        == 1
    )
    assert (
        _sample(
            body, "mercato_provider_call_duration_seconds_count", operation="execute", result="4xx"
        )
        == 1
    )
    assert _sample(body, "mercato_reconciliation_backlog", state="RECONCILING") == 0
    assert _sample(body, "mercato_reconciliation_backlog", state="RETRY_WAIT") == 0
    assert _sample(body, "mercato_oldest_pending_invocation_age_seconds") == 0
    assert _sample(body, "mercato_reserved_points_outstanding") == 0


def test_serve_with_workers_aggregates_metrics_across_processes(
    db_url: str, tmp_path: Path
) -> None:
    provider = start_echo_provider(tmp_path / "provider")
    data_dir = tmp_path / "data"
    port = free_port()
    calls = 12
    try:
        build_ops_world(_settings(db_url, data_dir), provider.base_url)
        env = _production_env(db_url, data_dir)
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        with (tmp_path / "serve.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", "2"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                base = f"http://127.0.0.1:{port}"
                wait_for(lambda: _live(base), what="serve --workers 2 to start")
                # Both workers up before the calls (on a loaded machine the second one starts
                # later): the calls may then land on either.
                wait_for(
                    lambda: len(_started(tmp_path / "serve.log")) >= 2,
                    what="serve's second worker to start",
                )
                with httpx.Client(base_url=base, timeout=30) as http:
                    pair = http.post(
                        "/v1/auth/login", json={"email": CALLER_EMAIL, "password": CALLER_PASSWORD}
                    ).json()
                    session = {"Authorization": f"Bearer {pair['accessToken']}"}
                    api_key = http.post("/v1/api-keys", json={"name": "w"}, headers=session).json()[
                        "apiKey"
                    ]
                    answers = [
                        http.post(
                            INVOKE,
                            json={"n": i},
                            headers={
                                "Authorization": f"Bearer {api_key}",
                                "Idempotency-Key": f"w{i}",
                            },
                        ).status_code
                        for i in range(calls)
                    ]
                    # Each scrape is served by either process; both must see every call.
                    scrapes = [http.get("/metrics").text for _ in range(4)]
                pids = _serving_pids(tmp_path / "serve.log")
            finally:
                process.terminate()
                process.wait(30)
    finally:
        provider.stop()

    assert answers == [200] * calls
    assert len(pids) == 2, "uvicorn should have started two worker processes"
    for scrape in scrapes:
        assert (
            _sample(scrape, "mercato_invokes_total", outcome="succeeded", settlement="SETTLED")
            == calls
        )
    assert (data_dir / "metrics" / f"serve-{port}").is_dir()


def _live(base: str) -> bool:
    try:
        return probe().get(base + "/health/live").status_code == 200
    except httpx.HTTPError:
        return False


def _started(log: Path) -> set[str]:
    """The worker pids that logged their start so far (read as text: the log is being written)."""
    return set(re.findall(r"Started server process \[(\d+)\]", log.read_text()))


def _serving_pids(log: Path) -> set[int]:
    pids = set()
    for line in _lines(log):
        match = re.search(r"Started server process \[(\d+)\]", line["msg"])
        if match:
            pids.add(int(match.group(1)))
    return pids
