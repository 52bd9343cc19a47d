"""The leanest-path floor (bench/leanest.py) does the product's work: on each store, a real
invoke through it is answered with the product's success body; a replay with the same key gets
the same body from a process that saw the key, from one that did not, and from `mercato serve`
itself (the rows are the product's); a key reused with another body is refused; and the
product's own `verify-ledger` balances afterwards, every accepted call settled exactly once."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders.stores import BACKENDS, PG_ADMIN_DSN

pytestmark = pytest.mark.functional

ROOT = Path(__file__).parents[3]


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
    with harness.database(store, tmp_path, PG_ADMIN_DSN) as db_url:
        env = harness.platform_env(db_url, data_dir)
        migrated = harness.mercato("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        credential = "bench-" + secrets.token_urlsafe(24)
        provider_env = {**os.environ, "BENCH_PROVIDER_CREDENTIAL": credential}
        provider_args = [sys.executable, "-m", "bench.lean_provider"]
        runtime = Runtime.from_settings(Settings(env="dev", data_dir=data_dir, database_url=db_url))

        def started(args: list[str], process_env: dict[str, str], name: str) -> Any:
            port = harness.free_port()
            log = tmp_path / f"{name}.log"
            return harness.process([*args, "--port", str(port)], process_env, log, port)

        leanest = [sys.executable, "-m", "bench.leanest"]
        serve = [sys.executable, "-m", "mercato", "serve"]
        try:
            with started(provider_args, provider_env, "provider") as (provider_url, _):
                seeded = harness.seed(
                    runtime, providers={harness.SERVICE: provider_url}, credential=credential
                )
                with (
                    started(leanest, env, "leanest-a") as (one, _),
                    started(leanest, env, "leanest-b") as (other, _),
                    started(serve, env, "serve") as (product, _),
                    httpx.Client(timeout=30) as client,
                ):
                    headers = {
                        "Authorization": f"Bearer {seeded.api_key}",
                        "Content-Type": "application/json",
                        "Idempotency-Key": "leanest-1",
                    }

                    def invoke(base: str, body: bytes, **changed: str) -> httpx.Response:
                        sent = {**headers, **changed}
                        return client.post(base + harness.INVOKE_PATH, content=body, headers=sent)

                    first = invoke(one, b'{"job":"x","n":7}')
                    assert first.status_code == 200, first.text
                    body = first.json()
                    assert body.keys() == {"invocationId", "result"}
                    assert body["result"] == {"echo": {"job": "x", "n": 7}}

                    # a replay where the key was seen (one read), where it was not (the accept
                    # statement finds the key taken), and through the product itself
                    for base in (one, other, product):
                        again = invoke(base, b'{"job":"x","n":7}')
                        assert again.status_code == 200, (base, again.text)
                        assert again.json() == body
                    for base in (one, other):
                        reused = invoke(base, b'{"job":"x","n":8}')
                        assert reused.status_code == 422
                        assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"

                    refused = invoke(one, b'{"job":"x"}', Authorization="Bearer mercato_live_no")
                    assert refused.status_code == 401
                    invalid = invoke(one, b'{"n":1}', **{"Idempotency-Key": "leanest-3"})
                    assert invalid.status_code == 422

                    second = invoke(other, b'{"job":"y"}', **{"Idempotency-Key": "leanest-2"})
                    assert second.status_code == 200
                    assert second.json()["invocationId"] != body["invocationId"]
                    # calls arriving together (on PostgreSQL they commit in groups)
                    together = asyncio.run(concurrent(one, dict(headers), 24))
                    assert [status for status, _ in together] == [200] * 24
                    assert len({invocation for _, invocation in together}) == 24

                    # the receipts the product serves list the calls, as written here
                    receipts = client.get(
                        product + "/v1/invocations?limit=50",
                        headers={"Authorization": headers["Authorization"]},
                    )
                    assert receipts.status_code == 200, receipts.text
                    listed = {item["invocationId"] for item in receipts.json()["items"]}
                    made = {body["invocationId"], second.json()["invocationId"]}
                    assert listed == made | {invocation for _, invocation in together}
                    target = harness.Target(platform=one, provider=provider_url, seeded=seeded)
                    target.invoke_answers = Counter({200: 2 + 24})
                    ledger = harness.ledger_check(runtime, env, target)
        finally:
            runtime.db.dispose()
    assert ledger["verify_ledger_balanced"] is True, ledger
    assert ledger["accepted"] == ledger["settled"] == 2 + 24
    assert ledger["held_reservations"] == 0
    assert ledger["every_accepted_call_settled_once"] is True


async def concurrent(base: str, headers: dict[str, str], calls: int) -> list[tuple[int, str]]:
    """`calls` invokes with fresh keys, all sent at once: (status, invocation id) of each."""
    from bench import harness

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:

        async def one(n: int) -> tuple[int, str]:
            sent = {**headers, "Idempotency-Key": f"together-{n}"}
            answer = await client.post(
                harness.INVOKE_PATH, content=b'{"job":"t","n":%d}' % n, headers=sent
            )
            return answer.status_code, answer.json().get("invocationId", "")

        return list(await asyncio.gather(*(one(n) for n in range(calls))))
