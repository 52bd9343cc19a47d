"""Fixed-window quotas: exactly `limit` slots per window, race-free, on both backends."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import Table, bindparam, literal, select

from builders.accounts import make_account
from mercato.accounts.models import Account
from mercato.db.runtime import Runtime
from mercato.quotas import service as quotas
from mercato.quotas.errors import InvalidQuota, RateLimitExceeded
from mercato.quotas.schemas import Policy, QuotaStatus

T0 = dt.datetime(2026, 3, 1, 12, 0, 10, tzinfo=dt.UTC)
POLICY = Policy("standard", 3, 60)


def take(runtime: Runtime, account_id: str, now: dt.datetime, policy: Policy = POLICY) -> int:
    with runtime.db.transaction() as session:
        return quotas.take_slot(session, account_id=account_id, policy=policy, now=now).accepted


def test_window_allows_limit_then_refuses_with_spec_body(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    assert [take(runtime, account, T0) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(RateLimitExceeded) as refused:
        take(runtime, account, T0 + dt.timedelta(seconds=5))
    error = refused.value
    assert error.status == 429 and error.code == "RATE_LIMIT_EXCEEDED"
    # The window is [12:00:00, 12:01:00); 45 s remain at 12:00:15.
    assert error.extra == {"policy": "standard", "limit": 3, "windowSeconds": 60, "retryAfter": 45}
    assert error.headers["Retry-After"] == "45"
    assert error.headers["RateLimit-Policy"] == '"standard";q=3;w=60'
    assert error.headers["RateLimit"] == '"standard";r=0;t=45'
    with runtime.db.read() as session:
        status = quotas.status(session, account_id=account, policy=POLICY, now=T0)
    assert status.to_json() == {
        "policy": "standard",
        "limit": 3,
        "windowSeconds": 60,
        "accepted": 3,
        "remaining": 0,
        "resetAt": "2026-03-01T12:01:00Z",
    }


def test_next_window_starts_fresh_and_refusal_consumes_nothing(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    for _ in range(3):
        take(runtime, account, T0)
    with pytest.raises(RateLimitExceeded):
        take(runtime, account, T0)
    assert take(runtime, account, T0 + dt.timedelta(seconds=50)) == 1
    with runtime.db.read() as session:
        status = quotas.status(
            session, account_id=account, policy=POLICY, now=T0 + dt.timedelta(seconds=51)
        )
    assert (status.accepted, status.remaining) == (1, 2)


def test_accounts_have_independent_windows_and_overrides(runtime: Runtime) -> None:
    first = make_account(runtime.db, "a@example.com")
    second = make_account(runtime.db, "b@example.com")
    for _ in range(3):
        take(runtime, first, T0)
    assert take(runtime, second, T0) == 1
    with runtime.db.transaction() as session:
        quotas.set_quota(
            session, account_id=second, policy="gold", limit=5, window_seconds=10, now=T0
        )
    with runtime.db.read() as session:
        policy = quotas.policy_for(session, account_id=second, default=POLICY)
    assert policy == Policy("gold", 5, 10)
    assert [take(runtime, second, T0, policy) for _ in range(5)] == [1, 2, 3, 4, 5]
    with pytest.raises(RateLimitExceeded):
        take(runtime, second, T0, policy)


def test_concurrent_takers_get_exactly_limit_slots(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    policy = Policy("standard", 7, 60)
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            take(runtime, account, T0, policy)
            result = "ok"
        except RateLimitExceeded:
            result = "limited"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("ok") == 7 and outcomes.count("limited") == 13


@pytest.mark.parametrize(
    ("limit", "window"),
    [(0, 60), (quotas.MAX_LIMIT + 1, 60), (5, 0), (5, quotas.MAX_WINDOW_SECONDS + 1)],
)
def test_a_policy_beyond_what_the_store_holds_is_refused(
    runtime: Runtime, limit: int, window: int
) -> None:
    account_id = make_account(runtime.db)
    with pytest.raises(InvalidQuota), runtime.db.transaction() as session:
        quotas.set_quota(
            session,
            account_id=account_id,
            policy="huge",
            limit=limit,
            window_seconds=window,
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        )
    with runtime.db.transaction() as session:  # the largest allowed policy is stored
        quotas.set_quota(
            session,
            account_id=account_id,
            policy="huge",
            limit=quotas.MAX_LIMIT,
            window_seconds=quotas.MAX_WINDOW_SECONDS,
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        )


def test_with_window_reads_what_current_status_reads(runtime: Runtime) -> None:
    # A replay reads the window beside its call (decision 0420): the columns `with_window`
    # adds to another statement say what `current_status` says, whatever the account's policy
    # and window.
    accounts_table = Account.__table__
    assert isinstance(accounts_table, Table)
    settings = runtime.settings
    default = quotas.default_policy(settings)
    statement = quotas.with_window(
        select(accounts_table.c.id).where(accounts_table.c.id == bindparam("account_id")),
        accounts_table.c.id,
        literal(default.name),
    )
    account = make_account(runtime.db)

    def both(now: dt.datetime) -> tuple[QuotaStatus, QuotaStatus]:
        with runtime.db.read() as session:
            row = session.execute(statement, {"account_id": account}).one()
            current = quotas.current_status(session, account_id=account, settings=settings, now=now)
        return quotas.window_status(tuple(row[1:]), default, now), current

    seen: list[QuotaStatus] = []
    for step in range(6):
        now = T0 + dt.timedelta(seconds=20 * step)
        if step == 1:
            take(runtime, account, now, default)  # the default policy's window
        if step == 3:
            with runtime.db.transaction() as session:
                quotas.set_quota(
                    session, account_id=account, policy="own", limit=5, window_seconds=30, now=now
                )
        if step == 4:
            take(runtime, account, now, Policy("own", 5, 30))  # the own policy's window
        read, current = both(now)
        assert read == current
        seen.append(read)
    later = T0 + dt.timedelta(hours=1)  # every window ended: nothing taken in the new one
    read, current = both(later)
    assert read == current
    assert [s.accepted for s in seen] == [0, 1, 1, 0, 1, 1]
