"""Fixed-window call quotas per account and policy (DESIGN.md §4, spec 2.6, 2.7, 8).

A slot is taken only inside the acceptance transaction of a new call intent, by a conditional
UPDATE whose row count decides: concurrent callers on PostgreSQL queue on the row lock and
re-check the condition; SQLite serialises writers with BEGIN IMMEDIATE.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import BigInteger, Select, Table, and_, bindparam, case, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

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


def default_policy(settings: Any) -> Policy:
    """The policy of accounts without an override (from settings)."""
    return Policy(
        name=settings.default_quota_policy,
        limit=settings.default_quota_limit,
        window_seconds=settings.default_quota_window_seconds,
    )


def policy_for(session: Session, *, account_id: str, default: Policy) -> Policy:
    """Return the account's own policy, else `default`."""
    row = session.execute(_POLICY_OF, {"account_id": account_id}).first()
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


def status(session: Session, *, account_id: str, policy: Policy, now: dt.datetime) -> QuotaStatus:
    """Read the account's current window without taking anything."""
    start = _window_start(policy, now)
    row = session.execute(_WINDOW_OF, {"account_id": account_id, "policy": policy.name}).first()
    accepted = row[1] if row is not None and row[0] == start else 0
    return _status(policy, start, accepted, now)


def current_status(
    session: Session, *, account_id: str, settings: Any, now: dt.datetime
) -> QuotaStatus:
    """The account's current window under its own policy (else the default), taking nothing:
    what the RateLimit headers, `/v1/rate-limit` and the account page show."""
    policy = policy_for(session, account_id=account_id, default=default_policy(settings))
    return status(session, account_id=account_id, policy=policy, now=now)


def _try_take(session: Session, account_id: str, policy: Policy, start: int) -> int | None:
    # (Bind names differ from column names: an UPDATE's parameters named after columns SET them.)
    params = {
        "b_account_id": account_id,
        "b_policy": policy.name,
        "start": start,
        "limit": policy.limit,
    }
    return session.execute(_TAKE, params).scalar_one_or_none()


def _take_statement() -> Any:
    """Take one slot: a new window starts at 1, the current one counts up to the limit."""
    start = bindparam("start", type_=BigInteger)
    return (
        update(_windows)
        .where(
            _windows.c.account_id == bindparam("b_account_id"),
            _windows.c.policy == bindparam("b_policy"),
            or_(
                _windows.c.window_start != start,
                and_(_windows.c.window_start == start, _windows.c.accepted < bindparam("limit")),
            ),
        )
        .values(
            accepted=case((_windows.c.window_start == start, _windows.c.accepted + 1), else_=1),
            window_start=start,
        )
        .returning(_windows.c.accepted)
    )


_TAKE = _take_statement()  # built once: every invoke runs it


def _insert_first(session: Session, account_id: str, policy: Policy, start: int) -> bool:
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = (
        insert(_windows)
        .values(account_id=account_id, policy=policy.name, window_start=start, accepted=1)
        .on_conflict_do_nothing()
        .returning(_windows.c.accepted)
    )
    # RETURNING yields a row only when this statement inserted it (rowcount is not portable).
    return session.execute(stmt).first() is not None


def take_slot(
    session: Session, *, account_id: str, policy: Policy, now: dt.datetime
) -> QuotaStatus:
    """Consume one slot of the current window or raise RateLimitExceeded (nothing taken)."""
    start = _window_start(policy, now)
    accepted = _try_take(session, account_id, policy, start)
    if accepted is None and _insert_first(session, account_id, policy, start):
        accepted = 1
    if accepted is None:
        # Lost the first-insert race: the row now exists, so the conditional update decides.
        accepted = _try_take(session, account_id, policy, start)
    if accepted is None:
        raise rate_limit_error(_status(policy, start, policy.limit, now))
    return _status(policy, start, accepted, now)


# --- the server-side slot (PostgreSQL; migration 0009, decision 0191) ----------------------
#
# `quota_take_slot` does what `take_slot` does, inside the invocation engine's one-statement
# accept; an exhausted window raises this SQLSTATE, which takes back the whole statement.
WINDOW_EXHAUSTED = "MC002"


def server_slot(policy: Policy, now: dt.datetime) -> dict[str, Any]:
    """The parameters of `quota_take_slot` for a call accepted at `now`."""
    return {
        "policy": policy.name,
        "window_start": _window_start(policy, now),
        "limit": policy.limit,
    }


def server_slot_taken(policy: Policy, now: dt.datetime, accepted: int) -> QuotaStatus:
    """The window after the server took the slot (`accepted` calls in it now)."""
    return _status(policy, _window_start(policy, now), accepted, now)


def server_slot_refused(policy: Policy, now: dt.datetime) -> RateLimitExceeded:
    """The error for a window the server found exhausted."""
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
