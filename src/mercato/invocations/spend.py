"""Hard per-key spend limits (DESIGN §8, decisions 0590–0592).

An API key may carry a limit `{points, period}`; `api_keys.spent_in_period` holds the points
of the calls counted since `spend_period_start`, the start of the key's current period. The
rule lives in the money programs (`mercato.invocations.money`), so it holds on both stores and
under any concurrency:

- accept (`limit_steps`, after the reservation, before the quota slot): on PostgreSQL the
  key's row, read with FOR KEY SHARE (so that a limit change waits for the calls in flight and
  the calls after it read the new limit); then one conditional UPDATE that adds the price to
  the current period's use (a new period starts from 0) only when the result stays within the
  limit (on SQLite, whose one writer needs no lock, it reads the limit from the row it updates);
  no row, when the key has a limit, is the refusal `KEY_LIMIT` (402 KEY_SPEND_LIMIT_REACHED),
  which aborts the whole acceptance. A key without a limit, and a session's call, write
  nothing.
- release (`giveback_step`): the price back to the key's use when the key's current period
  began no later than the call was accepted (a call of an earlier period gives nothing to the
  current one). Settle and refund leave the use as it is.

A limit change (`set_limit`) locks the key's row (PostgreSQL: FOR UPDATE, which waits for every
accept holding it) and counts the current period's use again from the calls themselves (those
the key made in the period and that were not released), so that a limit set, raised or given
another period is exact from the next call on. Nothing about a limit is kept in memory: the
hints (`mercato.db.hints`) never carry it.
"""

from __future__ import annotations

import calendar
import datetime as dt
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import BigInteger, Table, bindparam, case, func, select
from sqlalchemy.orm import Session

from mercato.accounts import service as accounts
from mercato.accounts.errors import ApiKeyNotFound, InvalidSpendLimit, KeySpendLimitReached
from mercato.accounts.models import ApiKey
from mercato.accounts.schemas import CreatedApiKey
from mercato.db import guarded
from mercato.db.base import UTCDateTime
from mercato.db.guarded import Empty, Expr, Refs, Step, inline, update_where
from mercato.db.plans import Plan, Rows, first, query
from mercato.invocations.models import Invocation
from mercato.invocations.schemas import Settlement

KEY_LIMIT = "key-limit"
"""The refusal code of `limit_steps`: (limit, used, period)."""

MAX_POINTS = 2**53 - 1  # a limit JSON carries exactly; BIGINT holds it
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
"""Where a TOTAL period starts: it never resets."""

_keys = cast(Table, ApiKey.__table__)
_k = _keys.c
_inv = cast(Table, Invocation.__table__).c


class Period(enum.StrEnum):
    DAY = "DAY"  # the UTC calendar day
    WEEK = "WEEK"  # the ISO week, from Monday 00:00 UTC
    MONTH = "MONTH"  # the UTC calendar month
    TOTAL = "TOTAL"  # for ever


def period_start(period: Period, now: dt.datetime) -> dt.datetime:
    """The start of the period `period` that holds `now` (UTC)."""
    now = now.astimezone(dt.UTC)
    day = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC)
    if period is Period.DAY:
        return day
    if period is Period.WEEK:
        return day - dt.timedelta(days=day.weekday())
    if period is Period.MONTH:
        return day.replace(day=1)
    return EPOCH


def period_end(period: Period, now: dt.datetime) -> dt.datetime | None:
    """When the period holding `now` ends and the use starts again from 0 (None: TOTAL)."""
    start = period_start(period, now)
    if period is Period.DAY:
        return start + dt.timedelta(days=1)
    if period is Period.WEEK:
        return start + dt.timedelta(days=7)
    if period is Period.MONTH:
        return start + dt.timedelta(days=calendar.monthrange(start.year, start.month)[1])
    return None


def start_params(now: dt.datetime) -> dict[str, dt.datetime]:
    """The accept program's inputs for `limit_steps`: each period's start at `now`."""
    return {f"spend_{period.value.lower()}": period_start(period, now) for period in Period}


# --- the steps ----------------------------------------------------------------------------


def _current_start(refs: Refs, period: Any) -> Any:
    """The start of the period `period` (a key's) at the program's `now` (`start_params`).
    Built from the inputs, not carried from step to step: a runner binds what a step returned
    as it was read."""
    starts = {p: refs.param(f"spend_{p.value.lower()}", UTCDateTime) for p in Period}
    return case(
        (period == inline(Period.DAY.value), starts[Period.DAY]),
        (period == inline(Period.WEEK.value), starts[Period.WEEK]),
        (period == inline(Period.MONTH.value), starts[Period.MONTH]),
        else_=starts[Period.TOTAL],
    )


def _used_since(start: Any) -> Any:
    """The key's use counted in the period that began at `start` (0 when the row's is older)."""
    return case((_k.spend_period_start >= start, _k.spent_in_period), else_=inline(0, BigInteger))


def limit_steps(prefix: str, *, key_id: Expr, price: Expr) -> list[Step]:
    """Count `price` against the limit of the key `key_id` (NULL: a session's call), or refuse
    `KEY_LIMIT` (see the module docstring). On SQLite (one writer, nothing to lock) there is no
    read step: the count reads the key's limit from its own row, so a call with a limited key
    sends one statement, and one without a limit (or a session's call) two, the count that
    changes no row and the `required_if` that finds no limit."""
    name = f"{prefix}_key"

    def read(refs: Refs) -> Any:
        # KEY SHARE: concurrent calls of the key do not wait for each other here; a limit
        # change (FOR UPDATE) waits for them, and they for it, then read its new row.
        return (
            select(
                _k.id,
                _k.spend_limit_points.label("points"),
                _k.spend_limit_period.label("period"),
            )
            .where(_k.id == key_id(refs), refs.gate)
            .with_for_update(key_share=True, of=_keys)
        )

    def limit(refs: Refs) -> tuple[Any, Any]:
        """The key's limit in the count: as the read step returned it (PostgreSQL), or the
        row's own columns (SQLite)."""
        if refs.dialect == "postgresql":
            return refs.col(name, "points"), refs.col(name, "period")
        return _k.spend_limit_points, _k.spend_limit_period

    def count(refs: Refs) -> Any:
        points, period = limit(refs)
        start = _current_start(refs, period)
        used = _used_since(start)
        counted = {
            "spent_in_period": used + price(refs),
            "spend_period_start": case(
                (_k.spend_period_start >= start, _k.spend_period_start), else_=start
            ),
        }
        return update_where(
            _keys,
            counted,
            _k.id == key_id(refs),
            refs.gate,
            points.is_not(None),
            used + price(refs) <= points,
        ).returning(_k.id)

    def of_key(refs: Refs, column: Any) -> Any:
        return select(column).where(_k.id == key_id(refs)).scalar_subquery()

    def detail(refs: Refs) -> list[Any]:
        if refs.dialect == "postgresql":
            points, period = limit(refs)
            start = _current_start(refs, period)
        else:
            points = of_key(refs, _k.spend_limit_points)
            period = of_key(refs, _k.spend_limit_period)
            start = _current_start(refs, _k.spend_limit_period)
        return [points, of_key(refs, _used_since(start)), period]

    def required(refs: Refs) -> Any:
        if refs.dialect == "postgresql":
            return refs.col(name, "points").is_not(None)
        return (
            select(_k.id).where(_k.id == key_id(refs), _k.spend_limit_points.is_not(None)).exists()
        )

    return [
        Step(name, read, Empty.SKIP, only="postgresql"),
        Step(
            f"{prefix}_count",
            count,
            Empty.REFUSE,
            code=KEY_LIMIT,
            detail=detail,
            required_if=required,
        ),
    ]


def giveback_step(name: str, *, key_id: Expr, price: Expr, invocation_id: Expr) -> Step:
    """Give a released call's `price` back to its key's use, when the key's current period
    began no later than the call (`invocation_id`) was accepted."""

    def build(refs: Refs) -> Any:
        points = price(refs)
        accepted_at = (
            select(_inv.created_at).where(_inv.id == invocation_id(refs)).scalar_subquery()
        )
        return update_where(
            _keys,
            {"spent_in_period": _k.spent_in_period - points},
            _k.id == key_id(refs),
            refs.gate,
            _k.spend_period_start <= accepted_at,
            _k.spent_in_period >= points,
        ).returning(_k.id)

    return Step(name, build, Empty.SKIP)


def refusal(refused: guarded.Refused, *, now: dt.datetime) -> KeySpendLimitReached:
    """The 402 of a `KEY_LIMIT` refusal read at `now`."""
    limit, used = refused.number(0), refused.number(1)
    period = Period(refused.detail[2]) if len(refused.detail) > 2 and refused.detail[2] else None
    return reached(limit=limit, used=used, period=period, now=now)


def reached(
    *, limit: int, used: int, period: Period | None, now: dt.datetime
) -> KeySpendLimitReached:
    ends = None if period is None else period_end(period, now)
    return KeySpendLimitReached(
        f"This API key may spend {limit} points {_per(period)}; {used} are spent.",
        limit=limit,
        used=used,
        resetsAt=iso(ends),
    )


def _per(period: Period | None) -> str:
    if period is None or period is Period.TOTAL:
        return "in all"
    return "per " + period.value.lower()


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


# --- reading and changing a key's limit ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeySpend:
    """A key's limit as a caller sees it: (None, None, None) without a limit."""

    points: int | None
    period: Period | None
    spent_in_period: int | None
    period_resets_at: dt.datetime | None

    def limit(self) -> dict[str, Any] | None:
        if self.points is None or self.period is None:
            return None
        return {"points": self.points, "period": self.period.value}


def spend_of(key: ApiKey, now: dt.datetime) -> KeySpend:
    """The limit of `key` and its use in the period holding `now`."""
    if key.spend_limit_points is None or key.spend_limit_period is None:
        return KeySpend(None, None, None, None)
    period = Period(key.spend_limit_period)
    start = period_start(period, now)
    counted = key.spend_period_start
    used = key.spent_in_period if counted is not None and counted >= start else 0
    return KeySpend(key.spend_limit_points, period, used, period_end(period, now))


def parse_limit(points: object, period: object) -> tuple[int, Period]:
    """A limit from an operator's or a form's values; InvalidSpendLimit naming the bad one."""
    if isinstance(points, str):
        points = int(points) if points.strip().isdigit() else None
    if isinstance(points, bool) or not isinstance(points, int) or not 0 <= points <= MAX_POINTS:
        raise InvalidSpendLimit(
            f"A spend limit is 0 to {MAX_POINTS} points.", field="spendLimit.points"
        )
    try:
        chosen = Period(str(period).upper())
    except ValueError:
        raise InvalidSpendLimit(
            "A spend limit's period is DAY, WEEK, MONTH or TOTAL.", field="spendLimit.period"
        ) from None
    return points, chosen


def _locked_key(session: Session, key_id: str, account_id: str | None) -> ApiKey:
    # FOR UPDATE: waits for the accepts holding the row (FOR KEY SHARE); they then read ours.
    chosen = select(ApiKey).where(ApiKey.id == key_id).with_for_update()
    key = session.scalars(chosen.execution_options(populate_existing=True)).one_or_none()
    if key is None or (account_id is not None and key.account_id != account_id):
        raise ApiKeyNotFound()
    return key


def create_key(
    session: Session,
    *,
    account_id: str,
    name: str,
    limit: tuple[int, Period] | None,
    now: dt.datetime,
) -> CreatedApiKey:
    """A new API key of the account, with `limit` (None: no limit), in the caller's
    transaction (the API's and the account page's); its plaintext is returned only here."""
    created = accounts.create_api_key(session, account_id=account_id, name=name, now=now)
    if limit is not None:
        set_limit(session, key_id=created.key_id, account_id=account_id, limit=limit, now=now)
    return created


def set_limit(
    session: Session,
    *,
    key_id: str,
    account_id: str | None,
    limit: tuple[int, Period] | None,
    now: dt.datetime,
) -> KeySpend:
    """Give the key `limit` (None: no limit), its use counted again from its calls
    (`account_id` scopes the lookup; None: an operator, any account)."""
    key = _locked_key(session, key_id, account_id)
    if limit is None:
        key.spend_limit_points = None
        key.spend_limit_period = None
        session.flush()
        return spend_of(key, now)
    points, period = limit
    start = period_start(period, now)
    key.spend_limit_points = points
    key.spend_limit_period = period.value
    key.spend_period_start = start
    key.spent_in_period = counted_use(
        session, account_id=key.account_id, key_id=key_id, since=start
    )
    session.flush()
    return spend_of(key, now)


# Through the account's index `(account_id, id)` (its predicate `id IS NOT NULL` spelled out so
# the planner may use it): no index names the key, so that a call's row keeps fewer index
# entries (decision 0602); this runs once per change of a limit.
_USE = select(func.coalesce(func.sum(_inv.price), 0)).where(
    _inv.account_id == bindparam("account_id"),
    _inv.id.is_not(None),
    _inv.api_key_id == bindparam("key_id"),
    _inv.created_at >= bindparam("since", type_=UTCDateTime),
    _inv.settlement != inline(Settlement.RELEASED.value),
)


@query
def counted_use(*, account_id: str, key_id: str, since: dt.datetime) -> Plan[int]:
    """The points of the key's calls (the key of `account_id`) accepted since `since` and not
    released."""
    params = {"account_id": account_id, "key_id": key_id, "since": since}
    row = first((yield Rows(_USE, params)))
    return 0 if row is None else int(row[0])


_LIMIT_OF = select(
    _k.spend_limit_points, _k.spend_limit_period, _k.spend_period_start, _k.spent_in_period
).where(_k.id == bindparam("key_id"))


@query
def over_limit(*, key_id: str, price: int, now: dt.datetime) -> Plan[KeySpendLimitReached | None]:
    """The refusal a call of `price` with the key would meet now, read outside acceptance
    (for a refusal DESIGN §3 orders after it); None when it is within the limit."""
    row = first((yield Rows(_LIMIT_OF, {"key_id": key_id})))
    if row is None or row[0] is None or row[1] is None:
        return None
    period = Period(row[1])
    counted = row[2]
    used = int(row[3]) if counted is not None and counted >= period_start(period, now) else 0
    if used + price <= int(row[0]):
        return None
    return reached(limit=int(row[0]), used=used, period=period, now=now)


def limits_of(keys: Sequence[ApiKey], now: dt.datetime) -> dict[str, KeySpend]:
    """`spend_of` for each key, by id."""
    return {key.id: spend_of(key, now) for key in keys}
