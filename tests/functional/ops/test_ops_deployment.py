"""docs/deployment.md on one machine: a throwaway PostgreSQL database migrated first, two
`serve` processes behind nginx, two `worker` processes, the database blob store, production
settings with secrets from the environment, and a real SDK provider on 127.0.0.1. Concurrent
invokes through nginx settle exactly once, artifacts download through nginx, the ledger
verifies balanced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from builders.nginx import Nginx, nginx_binary
from builders.ops import (
    CALLER_EMAIL,
    CALLER_PASSWORD,
    PRICE,
    PROVIDER_CREDENTIAL,
    SERVICE,
    build_ops_world,
    start_echo_provider,
)
from builders.platform_process import Serve, Worker, wait_for
from builders.provider import throwaway_postgres
from mercato.settings import Settings

pytestmark = pytest.mark.functional

SECRET_KEY = "deployment-test-secret-key-0123456789abcdef"
KEYS = 16
GRANT = 1000
INVOKE = f"/v1/services/{SERVICE}/versions/v1:invoke"
INVOKE_ROUTE = '"route":"/v1/services/{service_code}/versions/{version}:invoke"'


def _env(db_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        MERCATO_ENV="production",
        MERCATO_SECRET_KEY=SECRET_KEY,
        MERCATO_DATABASE_URL=db_url,
        MERCATO_DATA_DIR=str(data_dir),
        MERCATO_BLOB_STORE="database",
        MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES="true",
        MERCATO_PROVIDER_TIMEOUT_SECONDS="10",
    )
    return env


def _mercato(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mercato", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _scalar(db_url: str, sql: str, **params: object) -> object:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def _settled(http: httpx.Client, api_key: str, key: str, n: int) -> httpx.Response:
    """Replay the call with its key until its outcome is known (what a client does)."""

    def attempt() -> httpx.Response | None:
        response = http.post(
            INVOKE,
            json={"n": n, "artifact": f"thumb-{n}"},
            headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": key},
        )
        return response if response.status_code == 200 else None

    answer: httpx.Response = wait_for(attempt, what=f"{key} to settle", timeout=120)
    return answer


def test_production_setup_behind_nginx(tmp_path: Path) -> None:
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx; scripts/test does it)")
    data_dir = tmp_path / "data"
    with throwaway_postgres() as db_url:
        env = _env(db_url, data_dir)
        migrated = _mercato(env, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        provider = start_echo_provider(tmp_path / "provider", blobs=True)
        processes: list[Serve | Worker | Nginx] = []
        try:
            settings = Settings(
                env="production",
                secret_key=SECRET_KEY,  # type: ignore[arg-type]
                database_url=db_url,
                data_dir=data_dir,
                allow_private_provider_addresses=True,
            )
            build_ops_world(settings, provider.base_url, grant=GRANT, artifacts=True)
            serves = [Serve(env, tmp_path / f"serve-{i}.log") for i in range(2)]
            processes += serves
            processes += [Worker(env, tmp_path / f"worker-{i}.log") for i in range(2)]
            nginx = Nginx(binary, tmp_path / "nginx", [s.port for s in serves])
            processes.append(nginx)

            with httpx.Client(base_url=nginx.url, timeout=60) as http:
                pair = http.post(
                    "/v1/auth/login", json={"email": CALLER_EMAIL, "password": CALLER_PASSWORD}
                ).json()
                session = {"Authorization": f"Bearer {pair['accessToken']}"}
                api_key = http.post("/v1/api-keys", json={"name": "prod"}, headers=session).json()[
                    "apiKey"
                ]

                # Every key is sent twice at once, through nginx to either serve process.
                first: dict[str, list[int]] = {}
                lock = threading.Lock()
                barrier = threading.Barrier(2 * KEYS)

                def call(i: int) -> None:
                    barrier.wait()
                    response = http.post(
                        INVOKE,
                        json={"n": i, "artifact": f"thumb-{i}"},
                        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"k{i}"},
                    )
                    with lock:
                        first.setdefault(f"k{i}", []).append(response.status_code)

                threads = [
                    threading.Thread(target=call, args=(i,)) for i in range(KEYS) for _ in "ab"
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(120)
                final = {i: _settled(http, api_key, f"k{i}", i) for i in range(KEYS)}

                downloads = {}
                for i, answer in final.items():
                    invocation_id = answer.json()["invocationId"]
                    path = f"/v1/invocations/{invocation_id}/artifacts/a1"

                    def download(path: str = path) -> httpx.Response | None:
                        got = http.get(path, headers={"Authorization": f"Bearer {api_key}"})
                        return got if got.status_code == 200 else None

                    downloads[i] = wait_for(download, what=f"artifact of k{i}", timeout=120)
                balance = http.get("/v1/balance", headers={"Authorization": f"Bearer {api_key}"})
                metrics_through_proxy = http.get("/metrics")
                request_id = http.get("/health/live").headers.get("x-request-id")
        finally:
            for process in reversed(processes):
                process.stop()
            provider.stop()

        verified = _mercato(env, "admin", "verify-ledger", "--json")
        invocations = _scalar(db_url, "SELECT COUNT(*) FROM invocations")
        settled = _scalar(db_url, "SELECT COUNT(*) FROM invocations WHERE settlement = 'SETTLED'")
        held = _scalar(db_url, "SELECT COUNT(*) FROM reservations WHERE state = 'HELD'")
        blobs = _scalar(db_url, "SELECT COUNT(*) FROM artifact_blobs WHERE data IS NOT NULL")
        ciphertext = str(_scalar(db_url, "SELECT credential_ciphertext FROM provider_connections"))

    assert all(set(codes) <= {200, 202, 409} for codes in first.values()), first
    assert provider.runs() == KEYS  # the provider's business ran once per key
    assert (invocations, settled, held) == (KEYS, KEYS, 0)
    for i, answer in final.items():
        assert answer.json()["result"]["echo"] == {"n": i, "artifact": f"thumb-{i}"}
        assert downloads[i].content == f"thumb-{i}".encode()
    assert blobs == KEYS  # the database blob store, not files
    assert not (data_dir / "blobs").exists() or not any((data_dir / "blobs").rglob("*"))
    assert balance.json() == {"available": GRANT - KEYS * PRICE, "reserved": 0}
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["balanced"] is True
    assert PROVIDER_CREDENTIAL not in ciphertext  # encrypted at rest
    assert metrics_through_proxy.status_code == 200  # allowed from 127.0.0.1
    assert request_id is not None and len(request_id) == 32  # nginx's $request_id, passed on
    # nginx spread the calls over both serve processes.
    for i in range(2):
        lines = (tmp_path / f"serve-{i}.log").read_text().splitlines()
        assert any(INVOKE_ROUTE in line and '"status":200' in line for line in lines), i
