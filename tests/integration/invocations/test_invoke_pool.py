"""More concurrent invokes than the async database has connections, on a key whose last use is
due: every call completes. Recording the key's use inside the invoke's read took a second
connection while holding the first; under load every request held one and waited for another,
for ever (found by the benchmark on PostgreSQL, whose pool keeps 20 connections per loop)."""

from __future__ import annotations

import asyncio
import json

import httpx
from sqlalchemy import select

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import PRICE, SERVICE, World
from mercato.accounts.models import ApiKey
from mercato.ledger import service as ledger

CALLS = 30  # more than the PostgreSQL pool's 20 connections of one loop


def test_more_concurrent_first_calls_than_connections_all_settle(world: World) -> None:
    with world.runtime.db.transaction() as session:
        ledger.grant(
            session, account_id=world.caller_id, amount=CALLS * PRICE, now=world.clock.now()
        )
    path = f"/v1/services/{SERVICE}/versions/v1:invoke"

    async def calls() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=world.client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            sent = [
                client.post(
                    path,
                    content=json.dumps({"n": index}).encode(),
                    headers={
                        "Authorization": f"Bearer {world.api_key}",
                        "Idempotency-Key": f"pool-{index}",
                    },
                )
                for index in range(CALLS)
            ]
            # A deadlock detector, not a timing assertion: a hung pool never answers at all.
            return await asyncio.wait_for(asyncio.gather(*sent), timeout=120)

    responses = run_on_fresh_loop(calls())
    assert [r.status_code for r in responses] == [200] * CALLS, [r.text for r in responses][:3]
    assert world.balances() == (100, 0)
    assert world.ledger_balanced()
    with world.runtime.db.read() as session:
        used = session.scalar(select(ApiKey.last_used_at))
    assert used is not None  # the key's use was recorded, after the read
