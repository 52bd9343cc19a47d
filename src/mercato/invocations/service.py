"""Invocation rows: acceptance, leases, transitions and receipts. Never commits, never calls out.

Every transition is a conditional UPDATE on (id, state, lease owner): whoever does not hold the
row's lease, or finds it already moved, changes nothing. The terminal move and its ledger
operation (settle or release) happen in the same transaction, so an invocation settles once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, cast

import orjson
from sqlalchemy import ColumnElement, Table, bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from mercato.accounts import service as accounts
from mercato.artifacts import service as artifact_service
from mercato.catalog.service import InvocableVersion
from mercato.core.canonical import canonical_json, sha256_hex
from mercato.core.cursors import decode_cursor, encode_cursor
from mercato.core.errors import MercatoError
from mercato.core.ids import new_id
from mercato.db import guarded, runner
from mercato.db.aio_reads import grouped
from mercato.db.plans import Plan, Rows, Run, first, query
from mercato.invocations import money, spend
from mercato.invocations.errors import (
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    InvalidCursor,
    InvalidQuery,
    InvalidResolution,
    InvocationAlreadyResolved,
    InvocationNotFound,
    InvocationNotPending,
)
from mercato.invocations.models import Invocation, InvocationAttempt, InvocationDue
from mercato.invocations.schemas import (
    ACTIVE_STATES,
    PUBLIC_STATUSES,
    UNAVAILABLE,
    Address,
    Decision,
    InvocationView,
    Page,
    Settlement,
    State,
    StuckCall,
    view_of,
)
from mercato.ledger import service as ledger
from mercato.protocol import IDEMPOTENCY_KEY_MAX_LENGTH
from mercato.providers.schemas import DispatchTarget
from mercato.quotas import service as quotas
from mercato.quotas.schemas import Policy, QuotaStatus
from mercato.settings import Settings

_t = cast(Table, Invocation.__table__)
_c = _t.c
_attempts = cast(Table, InvocationAttempt.__table__)
_a = _attempts.c
_dues = cast(Table, InvocationDue.__table__)
# The calls that are not terminal, read through the worker's queue (decision 0602): no index of
# `invocations` names `state`, so that a settle is a HOT update.
_PENDING = _dues.join(_t, _c.id == _dues.c.invocation_id)
PROVIDER_KEY_PREFIX = "mercato:"
MAX_PAGE = 100

_VIEW_COLUMNS = money.VIEW_COLUMNS
_ACTIVE = [state.value for state in ACTIVE_STATES]

# The hot path's statements, built once: building a statement costs more than running it.
_INSERT = _t.insert()
_FIND_BY_KEY = select(*_VIEW_COLUMNS).where(
    _c.account_id == bindparam("account_id"), _c.idempotency_key == bindparam("idempotency_key")
)
_GET_VIEW = select(*_VIEW_COLUMNS).where(_c.id == bindparam("id"))
# A replay's one read (decision 0420): the call, the caller's API key proven (`digest`, NULL
# when nothing needs proving) and the account's quota window as it stands. Concurrent replays
# of a loop read together on PostgreSQL, one round trip (`aio_reads.grouped`, decision 0450).
_REPLAY = grouped(
    quotas.with_window(
        select(*_VIEW_COLUMNS, accounts.key_proof(bindparam("digest"))).where(
            _c.account_id == bindparam("account_id"),
            _c.idempotency_key == bindparam("idempotency_key"),
        ),
        _c.account_id,
        bindparam("default_policy"),
    )
)
_VIEW_WIDTH = len(_VIEW_COLUMNS)


def _view(row: Sequence[Any]) -> InvocationView:
    return view_of(row)


def provider_key_for(invocation_id: str) -> str:
    """The stable platform-generated key the provider sees (never the caller's key)."""
    return PROVIDER_KEY_PREFIX + invocation_id


def fingerprint_of(*, service_code: str, version: str, body: bytes) -> str:
    """SHA-256 over serviceCode, version and the canonical JSON body (raw bytes if not JSON)."""

    try:
        kind, material = "json", canonical_json(orjson.loads(body)).decode()
    except Exception:
        kind, material = "raw", body.hex()
    # Keys in RFC 8785's order ("json" and "raw" sort before "serviceCode", then "version"):
    # three plain strings under them are what `canonical_json` would hand to orjson, sorted
    # already, so orjson writes them directly (decision 0472); anything else, or a text orjson
    # refuses, goes through `canonical_json` as before.
    outer = {kind: material, "serviceCode": service_code, "version": version}
    if type(service_code) is str and type(version) is str:
        try:
            return sha256_hex(orjson.dumps(outer))
        except orjson.JSONEncodeError:
            pass
    return sha256_hex(canonical_json(outer))


# --- reads -------------------------------------------------------------------------------


@query
def find_by_key(*, account_id: str, idempotency_key: str) -> Plan[InvocationView | None]:
    """The account's invocation for this Idempotency-Key, if any."""
    row = first(
        (yield Rows(_FIND_BY_KEY, {"account_id": account_id, "idempotency_key": idempotency_key}))
    )
    return None if row is None else _view(row)


@dataclass(slots=True)
class Replayed:
    """What a replay reads in one statement (`find_replay`)."""

    # Not frozen: one call's value, never shared (see `flows.InvokeRequest`).
    view: InvocationView
    quota: QuotaStatus
    """The account's current window, taking nothing (`quotas.current_status`)."""
    key_proven: bool
    """Whether the API key `find_replay` was asked to prove may be used now."""


@query
def find_replay(
    *, account_id: str, idempotency_key: str, digest: str | None, default: Policy, now: dt.datetime
) -> Plan[Replayed | None]:
    """`find_by_key`, and with it, in the same statement, the account's quota window as
    `quotas.current_status` reads it at `now` and the proof of the API key whose digest is
    `digest` (`accounts.key_proof`); None when the account has no call with this key."""
    params = {
        "account_id": account_id,
        "idempotency_key": idempotency_key,
        "digest": digest,
        "default_policy": default.name,
    }
    row = first((yield Rows(_REPLAY, params)))
    if row is None:
        return None
    width = _VIEW_WIDTH
    quota = quotas.window_status(tuple(row[width + 1 :]), default, now)
    return Replayed(_view(row[:width]), quota, accounts.key_proven(row[width]))


@query
def get_view(*, invocation_id: str) -> Plan[InvocationView]:
    row = first((yield Rows(_GET_VIEW, {"id": invocation_id})))
    if row is None:
        raise InvocationNotFound()
    return _view(row)


def get_invocation_for_owner(
    session: Session, *, account_id: str, invocation_id: str
) -> InvocationView:
    """The invocation if `account_id` made it; anyone else gets 404 (existence never leaks)."""
    row = session.execute(
        select(*_VIEW_COLUMNS).where(_c.id == invocation_id, _c.account_id == account_id)
    ).first()
    if row is None:
        raise InvocationNotFound()
    return _view(row)


def _decode_cursor(cursor: str) -> str:
    value = decode_cursor(cursor)
    if value is None or not value.startswith("inv_") or len(value) > 40:
        raise InvalidCursor("The cursor is not valid.")
    return value


def list_for_owner(
    session: Session,
    *,
    account_id: str,
    limit: int = 20,
    cursor: str | None = None,
    status: str | None = None,
) -> Page:
    """The account's receipts, newest first, by keyset on the time-ordered id."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidQuery(f"limit must be 1-{MAX_PAGE}")
    # `id IS NOT NULL` (always true) lets the planner use the partial listing index (0371).
    query = select(*_VIEW_COLUMNS).where(_c.account_id == account_id, _c.id.is_not(None))
    if status is not None:
        if status not in PUBLIC_STATUSES:
            raise InvalidQuery(f"status must be one of {', '.join(PUBLIC_STATUSES)}")
        if status == "PENDING":
            query = query.where(_c.state.in_([s.value for s in ACTIVE_STATES]))
        else:
            query = query.where(_c.state == status)
    if cursor is not None:
        query = query.where(_c.id < _decode_cursor(cursor))
    rows = session.execute(query.order_by(_c.id.desc()).limit(limit + 1)).all()
    items = [_view(r) for r in rows[:limit]]
    more = len(rows) > limit
    return Page(items=items, next_cursor=encode_cursor(items[-1].invocation_id) if more else None)


# --- acceptance --------------------------------------------------------------------------


@query
def accept(
    *,
    invocation_id: str,
    account_id: str,
    channel: str,
    idempotency_key: str,
    fingerprint: str,
    version: InvocableVersion,
    payload: bytes,
    policy: Policy,
    address: Address,
    lease_owner: str,
    lease_seconds: float,
    now: dt.datetime,
    request_id: str | None = None,
    hint_generation: int | None = None,
    api_key_id: str | None = None,
) -> Plan[QuotaStatus | None]:
    """Accept one call intent: invocation row + its first attempt's address + reservation +
    quota slot, all or nothing.

    None, with nothing written, when the key was already used (a concurrent twin's, or an
    earlier call's: the edge answers it as a replay) or when `hint_generation` (what the call
    was served from memory at, decision 0400) is no longer the committed hint generation.
    """
    # The intent first: a same-key twin stops at its unique key before touching anything
    # shared. The account's balances and its quota window, which every concurrent call of the
    # account waits on, are locked last, right before the commit.
    # No `ledger.check_reservation`: the price was checked when the version was written
    # (1..MAX_PRICE, and the schema's CHECK), and the reference is the call's own fresh id.
    reservation_id = new_id("res")
    price = version.price
    quota = quotas.slot_params(account_id, policy, now)
    # The intent row's columns as the program's `inv_<column>` inputs (`money.INTENT_COLUMNS`).
    params: dict[str, Any] = {
        "inv_id": invocation_id,
        "inv_account_id": account_id,
        "inv_idempotency_key": idempotency_key,
        "inv_fingerprint": fingerprint,
        "inv_channel": channel,
        "inv_request_id": request_id,
        "inv_api_key_id": api_key_id,
        "inv_service_code": version.service_code,
        "inv_version": version.version,
        "inv_version_id": version.version_id,
        "inv_contract_digest": version.contract_digest,
        "inv_connection_id": version.connection_id,
        "inv_provider_account_id": version.provider_account_id,
        "inv_provider_share_bps": version.provider_share_bps,
        "inv_price": price,
        "inv_has_artifact_contract": version.has_artifact_contract,
        "inv_response_max_bytes": version.response_max_bytes,
        "inv_result_schema": version.contract.get("resultSchema", {}),
        "inv_payload": payload,
        "inv_provider_key": provider_key_for(invocation_id),
        "inv_state": State.DISPATCHING.value,
        "inv_settlement": Settlement.PENDING.value,
        "inv_reservation_id": reservation_id,
        "inv_sends": 1,
        "inv_reconciliations": 0,
        "inv_next_attempt_at": now,
        "inv_lease_owner": lease_owner,
        "inv_lease_expires_at": now + dt.timedelta(seconds=lease_seconds),
        "inv_created_at": now,
        "inv_updated_at": now,
        "now": now,
        "connection_revision": address.connection_revision,
        "base_url": address.base_url,
        "credential_digest": address.credential_digest,
        "reserve_amount": price,
        "quota_policy": quota["policy"],
        "quota_window_start": quota["window_start"],
        "quota_limit": quota["limit"],
        "hint_generation": hint_generation,
        **spend.start_params(now),
    }

    def refusal(refused: guarded.Refused) -> MercatoError:
        if refused.code == quotas.EXHAUSTED:
            return quotas.slot_refused(policy, now)
        if refused.code == spend.KEY_LIMIT:
            return spend.refusal(refused, now=now)
        return ledger.refusal(refused, amount=price)

    accepted = yield Run(money.ACCEPT, params, last=True, refusal=refusal)
    if accepted is None:
        return None
    return quotas.slot_taken(policy, now, accepted["quota.accepted"])


# --- work items and leases ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """What dispatching or reconciling one invocation needs (read under its lease)."""

    invocation_id: str
    state: str
    connection_id: str
    provider_key: str
    payload: bytes
    response_max_bytes: int
    result_schema: dict[str, Any]
    has_artifact_contract: bool
    sends: int
    reconciliations: int
    created_at: dt.datetime | None = None  # None: just accepted (the synchronous path)
    stuck: bool = False
    address: Address | None = None  # where the latest send went (None: not recorded)


_LATEST_ATTEMPT = (_a.invocation_id == _c.id) & (_a.attempt == _c.sends)
_LOAD_JOB = (
    select(
        _c.id,
        _c.state,
        _c.connection_id,
        _c.provider_key,
        _c.payload,
        _c.response_max_bytes,
        _c.result_schema,
        _c.has_artifact_contract,
        _c.sends,
        _c.reconciliations,
        _c.created_at,
        _c.stuck_at.is_not(None),
        _a.connection_revision,
        _a.base_url,
        _a.credential_digest,
    )
    .select_from(_t.outerjoin(_attempts, _LATEST_ATTEMPT))
    .where(_c.id == bindparam("id"))
)


@query
def load_job(*, invocation_id: str) -> Plan[Job]:
    """The invocation's work item, with the address its latest send went to."""
    row = first((yield Rows(_LOAD_JOB, {"id": invocation_id})))
    if row is None:
        raise InvocationNotFound()
    revision, base_url, digest = row[12:]
    address = None if base_url is None else Address(revision, base_url, digest)
    return replace(Job(*row[:11]), stuck=bool(row[11]), address=address)


def credential_digest(settings: Settings, credential: str) -> str:
    """An HMAC of a credential: tells whether two sends used the same one, never reveals it."""
    key = settings.derived_key("attempt-credential")
    return hmac.new(key, credential.encode(), hashlib.sha256).hexdigest()


def address_of(target: DispatchTarget, settings: Settings) -> Address:
    """The address a send to `target` goes to, as an attempt records it."""
    return Address(
        connection_revision=target.revision,
        base_url=target.base_url,
        credential_digest=credential_digest(settings, target.credential),
    )


def _states_in(states: Sequence[State]) -> ColumnElement[bool]:
    """`state` is one of `states`, spelled without an expanding IN (each value its own bound
    parameter, fixed when the statement is built), so every driver runs it as compiled."""
    return or_(*(_c.state == state.value for state in states))


def _p(name: str, column: Any) -> Any:
    """A bind parameter named `p_<name>` of `column`'s type (never a column's own name: an
    UPDATE would take it as a SET value)."""
    return bindparam(f"p_{name}", type_=column.type)


def _held(invocation_id: Any, lease_owner: Any) -> Any:
    """Still active and leased by `lease_owner` (values, or bind parameters)."""
    return (_c.id == invocation_id) & (_c.lease_owner == lease_owner) & _states_in(ACTIVE_STATES)


_HELD = _held(_p("id", _c.id), _p("lease_owner", _c.lease_owner))
_RECORD_SEND = (
    update(_t)
    .where(_HELD)
    .values(
        state=State.DISPATCHING.value,
        sends=_c.sends + 1,
        lease_expires_at=_p("lease_expires_at", _c.lease_expires_at),
        next_attempt_at=_p("now", _c.next_attempt_at),
        updated_at=_p("now", _c.updated_at),
    )
    .returning(_c.sends)
)
_RECORD_ATTEMPT = _attempts.insert()


@query
def record_send(
    *,
    invocation_id: str,
    lease_owner: str,
    lease_seconds: float,
    address: Address,
    now: dt.datetime,
) -> Plan[int | None]:
    """Count one more send and record where it goes, before making it, and renew the lease;
    None if the lease was lost."""
    row = first(
        (
            yield Rows(
                _RECORD_SEND,
                {
                    "p_id": invocation_id,
                    "p_lease_owner": lease_owner,
                    "p_lease_expires_at": now + dt.timedelta(seconds=lease_seconds),
                    "p_now": now,
                },
            )
        )
    )
    if row is None:
        return None
    sends = int(row[0])
    yield Rows(
        _RECORD_ATTEMPT,
        {
            "invocation_id": invocation_id,
            "attempt": sends,
            "connection_revision": address.connection_revision,
            "base_url": address.base_url,
            "credential_digest": address.credential_digest,
            "sent_at": now,
        },
    )
    return sends


_RECORD_RECONCILIATION = (
    update(_t)
    .where(_HELD)
    .values(reconciliations=_c.reconciliations + 1, updated_at=_p("now", _c.updated_at))
    .returning(_c.id)
)


@query
def record_reconciliation(*, invocation_id: str, lease_owner: str, now: dt.datetime) -> Plan[bool]:
    """Count one reconciliation call before making it; False if the lease was lost."""
    rows = yield Rows(
        _RECORD_RECONCILIATION, {"p_id": invocation_id, "p_lease_owner": lease_owner, "p_now": now}
    )
    return bool(rows)


def _schedule_statement(*, stuck: bool) -> Any:
    now = _p("now", _c.updated_at)
    marks = {"stuck_at": func.coalesce(_c.stuck_at, _p("now", _c.stuck_at))} if stuck else {}
    return (
        update(_t)
        .where(_HELD)
        .values(
            state=_p("state", _c.state),
            next_attempt_at=_p("next_attempt_at", _c.next_attempt_at),
            lease_owner=None,
            lease_expires_at=None,
            last_reason=_p("reason", _c.last_reason),
            updated_at=now,
            **marks,
        )
        .returning(_c.id)
    )


_SCHEDULE = {stuck: _schedule_statement(stuck=stuck) for stuck in (False, True)}


@query
def schedule(
    *,
    invocation_id: str,
    lease_owner: str,
    state: State,
    next_attempt_at: dt.datetime,
    reason: str,
    now: dt.datetime,
    stuck: bool = False,
) -> Plan[bool]:
    """Park an active invocation in RETRY_WAIT or RECONCILING and give up the lease;
    `stuck` marks it stuck (once: the first time is kept)."""
    assert state in (State.RETRY_WAIT, State.RECONCILING)
    rows = yield Rows(
        _SCHEDULE[stuck],
        {
            "p_id": invocation_id,
            "p_lease_owner": lease_owner,
            "p_state": state.value,
            "p_next_attempt_at": next_attempt_at,
            "p_reason": reason[:200],
            "p_now": now,
        },
    )
    return bool(rows)


def _claim_statement(states: tuple[State, ...], stuck: bool, skipping: bool) -> Any:
    now = _p("now", _c.lease_expires_at)
    free = (_c.lease_expires_at.is_(None)) | (_c.lease_expires_at <= now)
    lane = _c.stuck_at.is_not(None) if stuck else _c.stuck_at.is_(None)
    conditions = [_states_in(states), lane, _c.next_attempt_at <= _p("now", _c.next_attempt_at)]
    if skipping:  # connections that hold their share of the lane already (decision 0513)
        conditions.append(_c.connection_id.not_in(bindparam("p_skip", expanding=True)))
    due = (
        select(_c.id)
        .select_from(_PENDING)
        .where(*conditions, free)
        .order_by(_c.next_attempt_at)
        .limit(bindparam("p_limit"))
        .with_for_update(skip_locked=True, of=_t)  # SQLite's compiler leaves it out
        # Materialized: picked once. As a plain sub-SELECT, PostgreSQL may scan it again for
        # each row it updates, and a rescan skips the rows this very UPDATE just leased (no
        # longer free) and picks more than `limit`.
        .cte("due")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    return (
        update(_t)
        .where(_c.id.in_(select(due.c.id)), _states_in(states), free)
        .values(
            lease_owner=_p("lease_owner", _c.lease_owner),
            lease_expires_at=_p("lease_expires_at", _c.lease_expires_at),
            updated_at=_p("now", _c.updated_at),
        )
        .returning(_c.id, _c.request_id, _c.connection_id)
    )


_CLAIMS: dict[tuple[tuple[State, ...], bool, bool], Any] = {}


@query
def claim_due(
    *,
    states: tuple[State, ...],
    lease_owner: str,
    lease_seconds: float,
    now: dt.datetime,
    limit: int,
    stuck: bool = False,
    skip: frozenset[str] = frozenset(),
) -> Plan[list[tuple[str, str | None, str]]]:
    """Lease up to `limit` due invocations in `states` whose lease is free or expired, from
    one lane: fresh work, or (`stuck`) stuck calls, so neither waits behind the other; none of
    the connections in `skip`. Each comes as (invocation id, id of the request that accepted
    it, if any, its connection id).

    One statement: an UPDATE of the rows a materialized CTE picks. PostgreSQL: the pick is
    `FOR UPDATE SKIP LOCKED`, so concurrent workers pick disjoint rows. SQLite: writers are
    serialised, and the UPDATE's own condition decides anyway.
    """
    key = (tuple(states), stuck, bool(skip))
    statement = _CLAIMS.get(key)
    if statement is None:  # a handful of lanes: each built once
        statement = _CLAIMS.setdefault(key, _claim_statement(*key))
    params: dict[str, Any] = {
        "p_lease_owner": lease_owner,
        "p_lease_expires_at": now + dt.timedelta(seconds=lease_seconds),
        "p_now": now,
        "p_limit": limit,
    }
    if skip:
        params["p_skip"] = sorted(skip)
    rows = yield Rows(statement, params)
    return [(row[0], row[1], row[2]) for row in rows]


_UNCLAIM = (
    update(_t)
    .where(
        _c.id.in_(bindparam("p_ids", expanding=True)),
        _c.lease_owner == _p("lease_owner", _c.lease_owner),
    )
    .values(lease_owner=None, lease_expires_at=None)
)


@query
def unclaim(*, invocation_ids: list[str], lease_owner: str) -> Plan[None]:
    """Give back leases `claim_due` took for `lease_owner` and no step will use; the rows
    stay due as they were."""
    yield Rows(_UNCLAIM, {"p_ids": invocation_ids, "p_lease_owner": lease_owner})


# --- terminal transitions (with the ledger, in one transaction) --------------------------


_FINISHED = itemgetter(*(f"finish.{column.key}" for column in _VIEW_COLUMNS))
"""A terminal program's outputs that are the invocation's view, in the view's order."""


def _concluded(done: dict[str, Any] | None) -> InvocationView | None:
    if done is None:
        return None
    return view_of(_FINISHED(done))


def _conclude(
    session: Session, program: guarded.Program, params: dict[str, Any]
) -> InvocationView | None:
    """Run a terminal program: the invocation as it leaves it, or None when it stopped (the
    lease was lost, or the call is no longer pending)."""
    return _concluded(runner.run(session, program, params, ledger.refusal))


def _conclude_plan(
    program: guarded.Program, params: dict[str, Any], *, last: bool
) -> Plan[InvocationView | None]:
    done = yield Run(program, params, last=last, refusal=ledger.refusal)
    return _concluded(done)


@query
def finish_success(
    *,
    invocation_id: str,
    lease_owner: str,
    result: bytes,
    artifacts: list[dict[str, Any]] | None,
    now: dt.datetime,
) -> Plan[InvocationView | None]:
    """SUCCEEDED: charge the reservation (and record the artifact manifest); once only.

    Returns the invocation as this transaction leaves it, or None when the lease was lost.
    Without a manifest to record this is one statement (`money.SETTLE`, `Run.last`)."""
    view = yield from _conclude_plan(
        money.SETTLE,
        {
            "id": invocation_id,
            "lease_owner": lease_owner,
            "set_state": State.SUCCEEDED.value,
            "set_settlement": Settlement.SETTLED.value,
            "set_result": result,
            "set_artifacts": artifacts,
            "set_settled_at": now,
            "set_updated_at": now,
            "now": now,
        },
        last=not artifacts,
    )
    if view is not None and view.has_artifact_contract and artifacts:
        yield from artifact_service.record_manifest.plan(
            invocation_id=invocation_id, entries=artifacts, now=now
        )
    return view


@query
def finish_failure(
    *,
    invocation_id: str,
    lease_owner: str,
    error_code: str,
    provider_http_status: int | None,
    now: dt.datetime,
) -> Plan[InvocationView | None]:
    """FAILED (defined failure or platform-side): release the reservation; once only. One
    statement on PostgreSQL (`money.RELEASE`).

    Returns the invocation as this transaction leaves it, or None when the lease was lost."""
    return (
        yield from _conclude_plan(
            money.RELEASE,
            {
                "id": invocation_id,
                "lease_owner": lease_owner,
                "set_state": State.FAILED.value,
                "set_settlement": Settlement.RELEASED.value,
                "set_error_code": error_code,
                "set_provider_http_status": provider_http_status,
                "set_settled_at": now,
                "set_updated_at": now,
                "now": now,
            },
            last=True,
        )
    )


# --- stuck calls and staff resolutions (decisions 0201, 0202) ---------------------------

REASON_MAX = 2000
STUCK_LIST_MAX = 1000


def list_stuck(session: Session, *, limit: int = STUCK_LIST_MAX) -> list[StuckCall]:
    """Pending calls marked stuck, oldest acceptance first."""
    rows = session.execute(
        select(_c.id, _c.service_code, _c.version, _c.created_at, _c.reconciliations, _c.stuck_at)
        .select_from(_PENDING)
        .where(_c.state.in_(_ACTIVE), _c.stuck_at.is_not(None))
        .order_by(_c.created_at, _c.id)
        .limit(limit)
    ).all()
    return [StuckCall(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the platform got with a call: for staff, never for callers."""

    sends: int
    reconciliations: int
    stuck_at: dt.datetime | None
    last_reason: str | None
    resolved_by: str | None
    attempts: list[tuple[int, Address, dt.datetime]]


def progress_of(session: Session, *, invocation_id: str) -> Progress:
    """The call's sends and reconciliations so far, and where each send went."""
    row = session.execute(
        select(_c.sends, _c.reconciliations, _c.stuck_at, _c.last_reason, _c.resolved_by).where(
            _c.id == invocation_id
        )
    ).first()
    if row is None:
        raise InvocationNotFound()
    attempts = [
        (number, Address(revision, base_url, digest), sent_at)
        for number, revision, base_url, digest, sent_at in session.execute(
            select(
                _a.attempt, _a.connection_revision, _a.base_url, _a.credential_digest, _a.sent_at
            )
            .where(_a.invocation_id == invocation_id)
            .order_by(_a.attempt)
        )
    ]
    sends, reconciliations, stuck_at, last_reason, resolved_by = row
    return Progress(sends, reconciliations, stuck_at, last_reason, resolved_by, attempts)


def check_reason(reason: str) -> str:
    """A resolution's reason: 1-2000 characters, not only whitespace, no U+0000."""
    if not reason.strip() or len(reason) > REASON_MAX or "\x00" in reason:
        raise InvalidResolution(
            f"The reason must be 1-{REASON_MAX} characters, not blank, without U+0000."
        )
    return reason


def resolve(
    session: Session,
    *,
    invocation_id: str,
    decision: Decision,
    reason: str,
    actor: str,
    now: dt.datetime,
) -> InvocationView:
    """Settle (SUCCEEDED) or release (FAILED) a pending call by staff decision; once only.

    The move is conditional on the call still being pending, whoever holds its lease: a late
    provider answer then finds it terminal and changes nothing, and the ledger refuses a
    second resolution of the reservation anyway."""
    check_reason(reason)
    succeeded = decision is Decision.SUCCEEDED
    view = _conclude(
        session,
        money.RESOLVE_SETTLE if succeeded else money.RESOLVE_RELEASE,
        {
            "id": invocation_id,
            "set_state": State.SUCCEEDED.value if succeeded else State.FAILED.value,
            "set_settlement": (
                Settlement.SETTLED.value if succeeded else Settlement.RELEASED.value
            ),
            "set_error_code": None if succeeded else UNAVAILABLE,
            "set_settled_at": now,
            "set_updated_at": now,
            "set_resolution_decision": decision.value,
            "set_resolution_reason": reason,
            "set_resolved_by": actor[:64],
            "set_resolved_at": now,
            "now": now,
        },
    )
    if view is None:
        raise _not_resolvable(session, invocation_id)
    return view


def _not_resolvable(session: Session, invocation_id: str) -> Exception:
    view = get_view(session, invocation_id=invocation_id)  # raises InvocationNotFound
    resolution = view.resolution()
    if resolution is not None:
        return InvocationAlreadyResolved(
            f"Staff already resolved this call as {resolution['decision']} at "
            f"{resolution['resolvedAt']}; nothing was changed.",
            decision=resolution["decision"],
        )
    return InvocationNotPending(
        f"This call is no longer pending (settlement {view.settlement}); nothing was changed."
    )


def mark_refunded(session: Session, *, invocation_id: str, now: dt.datetime) -> None:
    """Record a completed full refund on the receipt (after ledger.refund in the same tx)."""
    moved = session.execute(
        update(_t)
        .where(_c.id == invocation_id, _c.settlement == Settlement.SETTLED.value)
        .values(settlement=Settlement.REFUNDED.value, refunded_at=now, updated_at=now)
        .returning(_c.id)
    ).first()
    if moved is None:
        view = get_view(session, invocation_id=invocation_id)
        if view.settlement != Settlement.REFUNDED:
            from mercato.ledger.errors import ReservationNotSettled

            raise ReservationNotSettled("Only a settled invocation can be refunded.")


def reservation_of(session: Session, *, invocation_id: str) -> str:
    """The ledger reservation id behind an invocation (for refunds)."""
    value = session.execute(select(_c.reservation_id).where(_c.id == invocation_id)).scalar()
    if value is None:
        raise InvocationNotFound()
    return str(value)


def check_idempotency_key(values: list[str]) -> str:
    """The one Idempotency-Key header: 1-191 visible ASCII characters (DESIGN.md §3)."""
    if not values or not values[0]:
        raise IdempotencyKeyMissing("Send an Idempotency-Key header (1-191 characters).")
    if len(values) > 1:
        raise IdempotencyKeyInvalid("Send exactly one Idempotency-Key header.")
    key = values[0]
    # Visible ASCII is "!"..."~": ASCII, printable (" "..."~") and no space. Three C scans,
    # not a generator's step per character (decision 0496).
    if (
        len(key) > IDEMPOTENCY_KEY_MAX_LENGTH
        or not key.isascii()
        or not key.isprintable()
        or " " in key
    ):
        raise IdempotencyKeyInvalid("The Idempotency-Key must be 1-191 visible ASCII characters.")
    return key
