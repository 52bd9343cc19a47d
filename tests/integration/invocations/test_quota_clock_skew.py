"""A late call never resets a newer quota window (issue 39 item 8, decision 0522), both stores.

Several serve processes on several hosts share one window row per (account, policy); each takes
its window start from its own clock. The upsert reset the row whenever a call's window start
differed from the row's, older or newer: a host whose clock was behind, past a window boundary,
set the row back to its old window with one call, and the next call from an up-to-date host set
it forward again with one call, so alternating hosts took a slot on every call, without limit.
The one upsert (`quotas.slot_step`) serves the quota service and the invoke acceptance; both are
driven here.
"""

from __future__ import annotations

import datetime as dt

from builders.accounts import make_account
from builders.invocation_world import World
from mercato.db.runtime import Runtime
from mercato.quotas import service as quotas
from mercato.quotas.errors import RateLimitExceeded
from mercato.quotas.schemas import Policy

POLICY = Policy("standard", 3, 60)
NOW = dt.datetime(2026, 3, 1, 12, 1, 5, tzinfo=dt.UTC)  # in the window [12:01:00, 12:02:00)
BEHIND = NOW - dt.timedelta(seconds=30)  # a host 30 s behind: [12:00:00, 12:01:00)


def _take(runtime: Runtime, account_id: str, now: dt.datetime) -> int | None:
    """The calls in the window after taking a slot, or None when refused."""
    try:
        with runtime.db.transaction() as session:
            taken = quotas.take_slot(session, account_id=account_id, policy=POLICY, now=now)
    except RateLimitExceeded:
        return None
    return taken.accepted


def _window(runtime: Runtime, account_id: str) -> tuple[int, int]:
    """The stored row: (window start, calls accepted in it)."""
    with runtime.db.read() as session:
        row = session.get(quotas.QuotaWindow, (account_id, POLICY.name))
        assert row is not None
        return row.window_start, row.accepted


def test_a_late_call_does_not_reset_a_full_newer_window(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    assert [_take(runtime, account, NOW) for _ in range(3)] == [1, 2, 3]
    newest = _window(runtime, account)

    assert _take(runtime, account, BEHIND) is None  # the newer window is full: refused
    assert _take(runtime, account, NOW) is None
    assert _window(runtime, account) == newest


def test_a_late_call_counts_in_the_newer_window(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    assert _take(runtime, account, NOW) == 1
    assert _take(runtime, account, BEHIND) == 2  # one more call in the window the row holds
    assert _take(runtime, account, NOW) == 3
    assert _take(runtime, account, NOW) is None
    assert _window(runtime, account) == (int(NOW.timestamp()) - 5, 3)


def test_hosts_with_skewed_clocks_together_stay_within_the_limit(runtime: Runtime) -> None:
    account = make_account(runtime.db)
    assert _take(runtime, account, BEHIND) == 1  # the late host happened to call first
    taken = [_take(runtime, account, now) for now in [NOW, BEHIND] * 5]
    # The up-to-date host opens the newer window; from then on both share its three slots.
    assert taken == [1, 2, 3] + [None] * 7
    # The next window opens as usual.
    assert _take(runtime, account, NOW + dt.timedelta(seconds=60)) == 1


def test_the_invoke_path_refuses_a_late_call_once_the_newer_window_is_full(world: World) -> None:
    world.set_quota(limit=2, window_seconds=60)
    assert [world.invoke({"n": i}, key=f"k{i}").status_code for i in range(2)] == [200, 200]

    world.clock.advance(-60)  # a serve process on a host whose clock is a window behind
    late = world.invoke({"n": 2}, key="late")
    assert late.status_code == 429, late.text
    assert late.json()["code"] == "RATE_LIMIT_EXCEEDED"

    world.clock.advance(60)  # and one that is not
    again = world.invoke({"n": 3}, key="again")
    assert again.status_code == 429, again.text

    assert len(world.invocations()) == 2
    assert world.balances() == (80, 0)  # two calls of 10 points; the refused took nothing
    assert sum(world.provider.executions.values()) == 2


def test_the_invoke_path_counts_a_late_call_in_the_newer_window(world: World) -> None:
    world.set_quota(limit=3, window_seconds=60)
    statuses = []
    for step, shift in enumerate([0, -60, 60, 0]):  # the second call from a host a window behind
        world.clock.advance(shift)
        statuses.append(world.invoke({"n": step}, key=f"k{step}").status_code)
    assert statuses == [200, 200, 200, 429]
    assert len(world.invocations()) == 3
    assert world.get("/v1/rate-limit").json()["accepted"] == 3
