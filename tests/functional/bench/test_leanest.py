"""The leanest-path floor (bench/leanest.py) does the product's work: on each store, a real
invoke through it is answered with the product's success body, a replay with the same key gets
the same body (nothing charged twice), a reused key with another body is refused, and the
product's own `verify-ledger` balances afterwards, every accepted call settled exactly once."""

from __future__ import annotations

import os
import secrets
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).parents[3]
BACKENDS = [b for b in os.environ.get("MERCATO_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]
PG_ADMIN = os.environ.get(
    "MERCATO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
).replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.mark.parametrize("store", BACKENDS)
def test_the_leanest_path_invokes_replays_and_leaves_a_balanced_ledger(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    monkeypatch.chdir(ROOT)
    from bench import harness

    from mercato.db.runtime import Runtime
    from mercato.settings import Settings

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with harness.database(store, tmp_path, PG_ADMIN) as db_url:
        env = harness.platform_env(db_url, data_dir)
        migrated = harness.mercato("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        credential = "bench-" + secrets.token_urlsafe(24)
        provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
        provider_port, leanest_port = harness.free_port(), harness.free_port()
        provider_args = [sys.executable, "-m", "bench.lean_provider", "--port", str(provider_port)]
        leanest_args = [sys.executable, "-m", "bench.leanest", "--port", str(leanest_port)]
        runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))
        try:
            with harness.process(
                provider_args, provider_env, tmp_path / "provider.log", provider_port
            ) as (provider_url, _):
                seeded = harness.seed(
                    runtime, providers={harness.SERVICE: provider_url}, credential=credential
                )
                with harness.process(leanest_args, env, tmp_path / "leanest.log", leanest_port) as (
                    leanest_url,
                    _,
                ):
                    target = harness.Target(
                        platform=leanest_url, provider=provider_url, seeded=seeded
                    )
                    headers = {
                        "Authorization": f"Bearer {seeded.api_key}",
                        "Content-Type": "application/json",
                        "Idempotency-Key": "leanest-1",
                    }
                    url = leanest_url + harness.INVOKE_PATH
                    with httpx.Client(timeout=30) as client:
                        first = client.post(url, content=b'{"job":"x","n":7}', headers=headers)
                        assert first.status_code == 200, first.text
                        body = first.json()
                        assert body.keys() == {"invocationId", "result"}
                        assert body["result"] == {"echo": {"job": "x", "n": 7}}

                        again = client.post(url, content=b'{"job":"x","n":7}', headers=headers)
                        assert again.status_code == 200
                        assert again.content == first.content

                        other = client.post(url, content=b'{"job":"x","n":8}', headers=headers)
                        assert other.status_code == 422
                        assert other.json()["code"] == "IDEMPOTENCY_KEY_REUSED"

                        bad_key = {**headers, "Authorization": "Bearer mercato_live_nope"}
                        refused = client.post(url, content=b'{"job":"x"}', headers=bad_key)
                        assert refused.status_code == 401

                        second = client.post(
                            url,
                            content=b'{"job":"y"}',
                            headers={**headers, "Idempotency-Key": "leanest-2"},
                        )
                        assert second.status_code == 200
                        assert second.json()["invocationId"] != body["invocationId"]
                    # the invoke the product's own API shows, settled (its receipt)
                    target.invoke_answers = Counter({200: 2})
                    ledger = harness.ledger_check(runtime, env, target)
        finally:
            runtime.db.dispose()
    assert ledger["verify_ledger_balanced"] is True, ledger
    assert ledger["accepted"] == ledger["settled"] == 2
    assert ledger["held_reservations"] == 0
    assert ledger["every_accepted_call_settled_once"] is True
