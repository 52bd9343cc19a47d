"""Fixed-window call quotas per account and policy (DESIGN.md §4, spec 2.6, 2.7, 8).

A slot is taken only inside the acceptance of a new call intent, by one conditional upsert
(`slot_step`) whose returned row decides: concurrent callers on PostgreSQL queue on the row lock
and re-check the condition; SQLite serialises writers with BEGIN IMMEDIATE.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Integer,
    Select,
    String,
    Table,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
)
from sqlalchemy.orm import Session

from mercato.db import runner
from mercato.db.guarded import Empty, Expr, Program, Refs, Step, inline, insert_select, param
from mercato.db.plans import Plan, Rows, first, query
from mercato.quotas.errors import InvalidQuota, RateLimitExceeded
from mercato.quotas.models import QuotaOverride, QuotaWindow
from mercato.quotas.schemas import Policy, QuotaStatus

_windows = cast(Table, QuotaWindow.__table__)
_overrides = cast(Table, QuotaOverride.__table__).c
# Read on every invoke and replay: built once, on the tables' columns (Core statements skip the
# ORM's execution path).
_POLICY_OF = select(_overrides.policy, _overrides.limit_count, _overrides.window_seconds).where(
    _overrides.account_id == bindparam("account_id")
)
POLICY_WIDTH = len(_POLICY_OF.selected_columns)
_WINDOW_OF = select(_windows.c.window_start, _windows.c.accepted).where(
    _windows.c.account_id == bindparam("account_id"), _windows.c.policy == bindparam("policy")
)
_POLICY_MAX = 64
MAX_LIMIT = 2**31 - 1  # the limit and the window's count are INTEGER columns
MAX_WINDOW_SECONDS = 366 * 24 * 3600  # a year: longer is no rate limit, and dates overflow


_MAX_DEFAULTS = 64
_DEFAULTS: dict[tuple[Any, Any, Any], Policy] = {}
"""The default policies made so far, by their settings (a frozen Policy is a value: the same
one serves every call; making it took 8.5 K instructions a replay, decision 0476)."""


def default_policy(settings: Any) -> Policy:
    """The policy of accounts without an override (from settings)."""
    key = (
        settings.default_quota_policy,
        settings.default_quota_limit,
        settings.default_quota_window_seconds,
    )
    policy = _DEFAULTS.get(key)
    if policy is None:
        policy = Policy(name=key[0], limit=key[1], window_seconds=key[2])
        if len(_DEFAULTS) < _MAX_DEFAULTS:
            _DEFAULTS[key] = policy
    return policy


@query
def policy_for(*, account_id: str, default: Policy) -> Plan[Policy]:
    """Return the account's own policy, else `default`."""
    row = first((yield Rows(_POLICY_OF, {"account_id": account_id})))
    return default if row is None else policy_of(tuple(row), default)


def with_policy(statement: Select[Any], account_id: Any) -> Select[Any]:
    """`statement` with the own policy of the account `account_id` (a column or bind parameter)
    as its last `POLICY_WIDTH` columns, all NULL when it has none."""
    return statement.add_columns(*_POLICY_OF.selected_columns).outerjoin(
        QuotaOverride.__table__, _overrides.account_id == account_id
    )


def policy_of(values: tuple[Any, ...], default: Policy) -> Policy:
    """The policy from the `POLICY_WIDTH` columns `with_policy` added (`default` when NULL)."""
    name, limit, window_seconds = values
    if name is None:
        return default
    return Policy(name=name, limit=limit, window_seconds=window_seconds)


def set_quota(
    session: Session,
    *,
    account_id: str,
    policy: str,
    limit: int,
    window_seconds: int,
    now: dt.datetime,
) -> Policy:
    """Give the account its own policy (replacing any earlier one)."""
    if not policy or len(policy) > _POLICY_MAX or not policy.isprintable() or '"' in policy:
        raise InvalidQuota(f"policy must be 1-{_POLICY_MAX} printable characters without quotes")
    if not 1 <= limit <= MAX_LIMIT or not 1 <= window_seconds <= MAX_WINDOW_SECONDS:
        raise InvalidQuota(f"limit must be 1-{MAX_LIMIT} and window 1-{MAX_WINDOW_SECONDS} seconds")
    row = session.get(QuotaOverride, account_id)
    if row is None:
        row = QuotaOverride(account_id=account_id)
        session.add(row)
    row.policy, row.limit, row.window_seconds, row.updated_at = policy, limit, window_seconds, now
    session.flush()
    return Policy(name=policy, limit=limit, window_seconds=window_seconds)


def _window_start(policy: Policy, now: dt.datetime) -> int:
    epoch = int(now.timestamp())
    return epoch - epoch % policy.window_seconds


def _status(policy: Policy, start: int, accepted: int, now: dt.datetime) -> QuotaStatus:
    reset = dt.datetime.fromtimestamp(start + policy.window_seconds, dt.UTC)
    return QuotaStatus(policy.name, policy.limit, policy.window_seconds, accepted, reset, now)


@query
def status(*, account_id: str, policy: Policy, now: dt.datetime) -> Plan[QuotaStatus]:
    """Read the account's current window without taking anything."""
    start = _window_start(policy, now)
    row = first((yield Rows(_WINDOW_OF, {"account_id": account_id, "policy": policy.name})))
    accepted = row[1] if row is not None and row[0] == start else 0
    return _status(policy, start, accepted, now)


def with_window(statement: Select[Any], account_id: Any, default_policy: Any) -> Select[Any]:
    """`statement` with what `current_status` reads, as its last `WINDOW_WIDTH` columns: the
    own policy of the account `account_id` (a column or bind parameter; NULLs when it has
    none, as `with_policy`), then its window under the policy in force (the own one, else the
    one named `default_policy`; NULLs when it has none). Read back with `window_status`.

    One statement instead of `current_status`'s two: a replay reads it beside its call."""
    in_force = func.coalesce(_overrides.policy, default_policy)
    window = _windows.c
    return (
        with_policy(statement, account_id)
        .add_columns(window.window_start, window.accepted)
        .outerjoin(_windows, and_(window.account_id == account_id, window.policy == in_force))
    )


WINDOW_WIDTH = POLICY_WIDTH + 2


def window_status(values: tuple[Any, ...], default: Policy, now: dt.datetime) -> QuotaStatus:
    """`current_status` from the `WINDOW_WIDTH` columns `with_window` added."""
    policy = policy_of(values[:POLICY_WIDTH], default)
    start = _window_start(policy, now)
    window_start, accepted = values[POLICY_WIDTH:]
    return _status(policy, start, accepted if window_start == start else 0, now)


@query
def current_status(*, account_id: str, settings: Any, now: dt.datetime) -> Plan[QuotaStatus]:
    """The account's current window under its own policy (else the default), taking nothing:
    what the RateLimit headers, `/v1/rate-limit` and the account page show."""
    policy = yield from policy_for.plan(account_id=account_id, default=default_policy(settings))
    return (yield from status.plan(account_id=account_id, policy=policy, now=now))


# The slot, written once for both stores (`mercato.db.guarded`): one upsert. A newer window
# starts at 1, the current one counts up to the limit; the account's first call under a policy
# inserts its row (a concurrent first call waits on the unique key, then updates). A window only
# moves forward: a call whose window start is older than the row's (its host's clock is behind
# another's) counts in the row's newer window, under its limit, and never resets it (decision
# 0522). No row back: the window is exhausted and nothing was taken. On PostgreSQL the row lock
# of the upsert queues concurrent callers, which re-check the condition on the latest row;
# SQLite serialises writers with BEGIN IMMEDIATE.
EXHAUSTED = "quota"
"""The refusal code of an exhausted window (`guarded.Refused.code`)."""


def slot_step(
    *, name: str, account_id: Expr, policy: Expr, window_start: Expr, limit: Expr
) -> Step:
    """The step that takes one slot (returns `accepted`, the calls in the window now)."""

    def build(refs: Refs) -> Any:
        start = window_start(refs)
        values = {
            "account_id": account_id(refs),
            "policy": policy(refs),
            "window_start": start,
            "accepted": inline(1, Integer),
        }
        write = insert_select(refs, _windows, values)
        current = _windows.c
        newer = current.window_start < write.excluded.window_start
        return write.on_conflict_do_update(
            index_elements=[current.account_id, current.policy],
            set_={
                "accepted": case((newer, inline(1, Integer)), else_=current.accepted + 1),
                "window_start": case(
                    (newer, write.excluded.window_start), else_=current.window_start
                ),
            },
            where=or_(newer, current.accepted < limit(refs)),
        ).returning(current.accepted)

    return Step(name, build, Empty.REFUSE, code=EXHAUSTED)


_TAKE = Program(
    "quota-take-slot",
    (
        slot_step(
            name="quota",
            account_id=param("account_id", String),
            policy=param("policy", String),
            window_start=param("window_start", BigInteger),
            limit=param("limit", Integer),
        ),
    ),
    outputs=(("quota", "accepted"),),
)


def slot_params(account_id: str, policy: Policy, now: dt.datetime) -> dict[str, Any]:
    """The inputs of `slot_step` (as `take_slot` names them) for a call accepted at `now`."""
    return {
        "account_id": account_id,
        "policy": policy.name,
        "window_start": _window_start(policy, now),
        "limit": policy.limit,
    }


def take_slot(
    session: Session, *, account_id: str, policy: Policy, now: dt.datetime
) -> QuotaStatus:
    """Consume one slot of the current window or raise RateLimitExceeded (nothing taken)."""
    params = slot_params(account_id, policy, now)
    taken = runner.run(session, _TAKE, params, lambda _refused: slot_refused(policy, now))
    assert taken is not None
    return slot_taken(policy, now, taken["quota.accepted"])


def slot_taken(policy: Policy, now: dt.datetime, accepted: int) -> QuotaStatus:
    """The window after a slot was taken (`accepted` calls in it now)."""
    return _status(policy, _window_start(policy, now), accepted, now)


def slot_refused(policy: Policy, now: dt.datetime) -> RateLimitExceeded:
    """The error for an exhausted window."""
    return rate_limit_error(_status(policy, _window_start(policy, now), policy.limit, now))


def rate_limit_error(current: QuotaStatus) -> RateLimitExceeded:
    """The spec 2.7 error for an exhausted window, with Retry-After and RateLimit headers."""
    retry_after = current.reset_seconds
    error = RateLimitExceeded(
        f"The {current.policy} policy allows {current.limit} calls per "
        f"{current.window_seconds} seconds; retry after {retry_after} seconds.",
        retry_after=retry_after,
        policy=current.policy,
        limit=current.limit,
        windowSeconds=current.window_seconds,
        retryAfter=retry_after,
    )
    error.headers.update(current.headers())
    return error
