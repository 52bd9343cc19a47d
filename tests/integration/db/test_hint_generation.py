"""The hint generation (decision 0400) moves with every committed change a hint is made of, and
only with those: a revoked key, a hold, a quota policy, a connection change; never a new
account or key, nor a key's recorded use. A rolled-back change leaves it where it was."""

from __future__ import annotations

import pytest

from builders.accounts import make_account, make_api_key
from builders.event_loops import run_on_fresh_loop
from mercato.accounts import service as accounts
from mercato.core.clock import utcnow
from mercato.db.hints import generation_plan
from mercato.db.runtime import Runtime
from mercato.quotas import service as quotas


def generation(runtime: Runtime) -> int:
    with runtime.db.read() as session:
        return generation_plan(session)


def test_what_moves_the_generation_and_what_does_not(runtime: Runtime) -> None:
    start = generation(runtime)
    caller = make_account(runtime.db, "caller@example.com", password=None)
    _, key_id = make_api_key(runtime.db, caller)
    with runtime.db.transaction() as session:
        accounts.touch_api_key(session, key_id=key_id, now=utcnow())
    assert generation(runtime) == start  # new rows and a recorded use: no hint is stale

    with runtime.db.transaction() as session:
        quotas.set_quota(
            session, account_id=caller, policy="p", limit=5, window_seconds=60, now=utcnow()
        )
    assert generation(runtime) == start + 1

    with pytest.raises(RuntimeError), runtime.db.transaction() as session:
        accounts.revoke_api_key(session, key_id=key_id, account_id=None, now=utcnow())
        session.flush()
        raise RuntimeError("rolled back")
    assert generation(runtime) == start + 1

    with runtime.db.transaction() as session:
        accounts.revoke_api_key(session, key_id=key_id, account_id=None, now=utcnow())
    assert generation(runtime) == start + 2


def test_the_async_side_reads_the_same_generation(runtime: Runtime) -> None:
    caller = make_account(runtime.db, "caller@example.com", password=None)
    with runtime.db.transaction() as session:
        quotas.set_quota(
            session, account_id=caller, policy="p", limit=5, window_seconds=60, now=utcnow()
        )

    async def read() -> int:
        async with runtime.adb.read() as conn:
            return await generation_plan.aio(conn)

    assert run_on_fresh_loop(read()) == generation(runtime) >= 1
