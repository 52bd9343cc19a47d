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
from functools import lru_cache
from typing import Any, cast

import orjson
from sqlalchemy import LargeBinary, Table, bindparam, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from mercato.artifacts import service as artifact_service
from mercato.catalog.service import InvocableVersion
from mercato.core.canonical import canonical_json, sha256_hex
from mercato.core.cursors import decode_cursor, encode_cursor
from mercato.core.ids import new_id
from mercato.db.base import UTCDateTime
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
from mercato.invocations.models import Invocation, InvocationAttempt
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
PROVIDER_KEY_PREFIX = "mercato:"
MAX_PAGE = 100

_VIEW_COLUMNS = (
    _c.id,
    _c.account_id,
    _c.service_code,
    _c.version,
    _c.contract_digest,
    _c.state,
    _c.settlement,
    _c.price,
    _c.has_artifact_contract,
    _c.idempotency_key,
    _c.fingerprint,
    _c.channel,
    _c.error_code,
    _c.provider_http_status,
    _c.result,
    _c.artifacts,
    _c.lease_expires_at,
    _c.created_at,
    _c.settled_at,
    _c.refunded_at,
    _c.resolution_decision,
    _c.resolution_reason,
    _c.resolved_at,
)

# The hot path's statements, built once: building a statement costs more than running it.
_INSERT = _t.insert()
_FIND_BY_KEY = select(*_VIEW_COLUMNS).where(
    _c.account_id == bindparam("account_id"), _c.idempotency_key == bindparam("idempotency_key")
)
_GET_VIEW = select(*_VIEW_COLUMNS).where(_c.id == bindparam("id"))


def _view(row: Sequence[Any]) -> InvocationView:
    return InvocationView(*row)


def provider_key_for(invocation_id: str) -> str:
    """The stable platform-generated key the provider sees (never the caller's key)."""
    return PROVIDER_KEY_PREFIX + invocation_id


def fingerprint_of(*, service_code: str, version: str, body: bytes) -> str:
    """SHA-256 over serviceCode, version and the canonical JSON body (raw bytes if not JSON)."""
    import orjson

    try:
        canonical = canonical_json(orjson.loads(body)).decode()
        material: dict[str, str] = {"json": canonical}
    except Exception:
        material = {"raw": body.hex()}
    return sha256_hex(canonical_json({"serviceCode": service_code, "version": version, **material}))


# --- reads -------------------------------------------------------------------------------


def find_by_key(
    session: Session, *, account_id: str, idempotency_key: str
) -> InvocationView | None:
    """The account's invocation for this Idempotency-Key, if any."""
    row = session.execute(
        _FIND_BY_KEY, {"account_id": account_id, "idempotency_key": idempotency_key}
    ).first()
    return None if row is None else _view(row)


def get_view(session: Session, *, invocation_id: str) -> InvocationView:
    row = session.execute(_GET_VIEW, {"id": invocation_id}).first()
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
    query = select(*_VIEW_COLUMNS).where(_c.account_id == account_id)
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


def accept(
    session: Session,
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
) -> QuotaStatus:
    """Accept one call intent: invocation row + its first attempt's address + reservation +
    quota slot, all or nothing.

    A concurrent twin with the same key fails on the unique (account, key) constraint and the
    caller's transaction rolls back; the edge then answers it as a replay.
    """
    # The intent first: a same-key twin stops at its unique key before touching anything
    # shared. The account's balances and its quota window, which every concurrent call of the
    # account waits on, are locked last, right before the commit.
    reservation_id = new_id("res")
    row = {
        "id": invocation_id,
        "account_id": account_id,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "channel": channel,
        "service_code": version.service_code,
        "version": version.version,
        "version_id": version.version_id,
        "contract_digest": version.contract_digest,
        "connection_id": version.connection_id,
        "provider_account_id": version.provider_account_id,
        "provider_share_bps": version.provider_share_bps,
        "price": version.price,
        "has_artifact_contract": version.has_artifact_contract,
        "response_max_bytes": version.response_max_bytes,
        "result_schema": version.contract.get("resultSchema", {}),
        "payload": payload,
        "provider_key": provider_key_for(invocation_id),
        "state": State.DISPATCHING.value,
        "settlement": Settlement.PENDING.value,
        "reservation_id": reservation_id,
        "sends": 1,
        "reconciliations": 0,
        "next_attempt_at": now,
        "lease_owner": lease_owner,
        "lease_expires_at": now + dt.timedelta(seconds=lease_seconds),
        "created_at": now,
        "updated_at": now,
    }
    if _on_server(session):
        return _accept_on_server(session, row, address, policy, now)
    session.execute(_INSERT, row)
    _record_attempt(session, invocation_id, 1, address, now)
    ledger.reserve(
        session,
        account_id=account_id,
        amount=version.price,
        reference=invocation_id,
        now=now,
        reservation_id=reservation_id,
        savepoint=False,  # this transaction is all or nothing
    )
    return quotas.take_slot(session, account_id=account_id, policy=policy, now=now)


def _on_server(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def settles_in_one_statement(dialect: str, artifacts: list[dict[str, Any]] | None) -> bool:
    """Whether `finish_success` is one statement on this database (`Database.statement()`):
    on PostgreSQL, unless there is an artifact manifest to record (decision 0191)."""
    return dialect == "postgresql" and not artifacts


# PostgreSQL accepts in one statement (migration 0009, decision 0191): `invocation_accept`
# appends the intent, reserves (`ledger_reserve`) and takes the quota slot (`quota_take_slot`),
# and a refusal raises, which takes back all of it. Run in `Database.statement()` it needs no
# BEGIN or COMMIT.
_ACCEPT_ON_SERVER = text(
    "SELECT invocation_accept("
    "CAST(:id AS text), CAST(:account_id AS text), CAST(:idempotency_key AS text), "
    "CAST(:fingerprint AS text), CAST(:channel AS text), CAST(:service_code AS text), "
    "CAST(:version AS text), CAST(:version_id AS text), CAST(:contract_digest AS text), "
    "CAST(:connection_id AS text), CAST(:provider_account_id AS text), "
    "CAST(:provider_share_bps AS integer), CAST(:price AS integer), "
    "CAST(:has_artifact_contract AS boolean), CAST(:response_max_bytes AS integer), "
    "CAST(:result_schema AS json), :payload, CAST(:provider_key AS text), "
    "CAST(:state AS text), CAST(:settlement AS text), CAST(:reservation_id AS text), "
    "CAST(:lease_owner AS text), :lease_expires_at, :now, CAST(:transfer_id AS text), "
    "CAST(:entry_ids AS text[]), CAST(:new_account_ids AS text[]), CAST(:policy AS text), "
    "CAST(:window_start AS bigint), CAST(:limit AS integer), "
    "CAST(:connection_revision AS integer), CAST(:base_url AS text), "
    "CAST(:credential_digest AS text))"
).bindparams(
    bindparam("payload", type_=LargeBinary()),
    bindparam("lease_expires_at", type_=UTCDateTime()),
    bindparam("now", type_=UTCDateTime()),
)


def _accept_on_server(
    session: Session, row: dict[str, Any], address: Address, policy: Policy, now: dt.datetime
) -> QuotaStatus:
    price = row["price"]
    ledger.check_reservation(amount=price, reference=row["id"])
    # The row's values under their column names; the function sets the rest itself (sends,
    # reconciliations, next_attempt_at and both timestamps from `now`). Names it does not
    # bind are left out of the statement.
    params = {
        **row,
        "result_schema": orjson.dumps(row["result_schema"]).decode(),
        "now": now,
        "connection_revision": address.connection_revision,
        "base_url": address.base_url,
        "credential_digest": address.credential_digest,
        **ledger.server_transfer_ids(),
        **quotas.server_slot(policy, now),
    }
    try:
        accepted = session.execute(_ACCEPT_ON_SERVER, params).scalar_one()
    except DBAPIError as error:
        sqlstate, detail = _raised(error)
        if sqlstate == quotas.WINDOW_EXHAUSTED:
            raise quotas.server_slot_refused(policy, now) from None
        refusal = ledger.server_refusal(sqlstate, detail, amount=price)
        if refusal is not None:
            raise refusal from None
        raise
    return quotas.server_slot_taken(policy, now, int(accepted))


def _raised(error: DBAPIError) -> tuple[str | None, str | None]:
    """The SQLSTATE and DETAIL of what the server raised."""
    cause = error.orig
    diag = getattr(cause, "diag", None)
    return getattr(cause, "sqlstate", None), getattr(diag, "message_detail", None)


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


def load_job(session: Session, *, invocation_id: str) -> Job:
    """The invocation's work item, with the address its latest send went to."""
    latest = (_a.invocation_id == _c.id) & (_a.attempt == _c.sends)
    row = session.execute(
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
        .select_from(_t.outerjoin(_attempts, latest))
        .where(_c.id == invocation_id)
    ).first()
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


def _record_attempt(
    session: Session, invocation_id: str, attempt: int, address: Address, now: dt.datetime
) -> None:
    session.execute(
        _attempts.insert(),
        {
            "invocation_id": invocation_id,
            "attempt": attempt,
            "connection_revision": address.connection_revision,
            "base_url": address.base_url,
            "credential_digest": address.credential_digest,
            "sent_at": now,
        },
    )


def _held(invocation_id: Any, lease_owner: Any) -> Any:
    """Still active and leased by `lease_owner` (values, or bind parameters)."""
    return (
        (_c.id == invocation_id)
        & (_c.lease_owner == lease_owner)
        & _c.state.in_([s.value for s in ACTIVE_STATES])
    )


def record_send(
    session: Session,
    *,
    invocation_id: str,
    lease_owner: str,
    lease_seconds: float,
    address: Address,
    now: dt.datetime,
) -> int | None:
    """Count one more send and record where it goes, before making it, and renew the lease;
    None if the lease was lost."""
    stmt = (
        update(_t)
        .where(_held(invocation_id, lease_owner))
        .values(
            state=State.DISPATCHING.value,
            sends=_c.sends + 1,
            lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
            next_attempt_at=now,
            updated_at=now,
        )
        .returning(_c.sends)
    )
    sends: int | None = session.execute(stmt).scalar_one_or_none()
    if sends is not None:
        _record_attempt(session, invocation_id, sends, address, now)
    return sends


def record_reconciliation(
    session: Session, *, invocation_id: str, lease_owner: str, now: dt.datetime
) -> bool:
    """Count one reconciliation call before making it; False if the lease was lost."""
    stmt = (
        update(_t)
        .where(_held(invocation_id, lease_owner))
        .values(reconciliations=_c.reconciliations + 1, updated_at=now)
        .returning(_c.id)
    )
    return session.execute(stmt).first() is not None


def schedule(
    session: Session,
    *,
    invocation_id: str,
    lease_owner: str,
    state: State,
    next_attempt_at: dt.datetime,
    reason: str,
    now: dt.datetime,
    stuck: bool = False,
) -> bool:
    """Park an active invocation in RETRY_WAIT or RECONCILING and give up the lease;
    `stuck` marks it stuck (once: the first time is kept)."""
    assert state in (State.RETRY_WAIT, State.RECONCILING)
    marks = {"stuck_at": func.coalesce(_c.stuck_at, now)} if stuck else {}
    stmt = (
        update(_t)
        .where(_held(invocation_id, lease_owner))
        .values(
            state=state.value,
            next_attempt_at=next_attempt_at,
            lease_owner=None,
            lease_expires_at=None,
            last_reason=reason[:200],
            updated_at=now,
            **marks,
        )
        .returning(_c.id)
    )
    return session.execute(stmt).first() is not None


def claim_due(
    session: Session,
    *,
    states: tuple[State, ...],
    lease_owner: str,
    lease_seconds: float,
    now: dt.datetime,
    limit: int,
    stuck: bool = False,
) -> list[str]:
    """Lease up to `limit` due invocations in `states` whose lease is free or expired, from
    one lane: fresh work, or (`stuck`) stuck calls, so neither waits behind the other.

    PostgreSQL: `FOR UPDATE SKIP LOCKED` so concurrent workers pick disjoint rows. SQLite:
    writers are serialised, and the conditional UPDATE below decides anyway.
    """
    free = (_c.lease_expires_at.is_(None)) | (_c.lease_expires_at <= now)
    lane = _c.stuck_at.is_not(None) if stuck else _c.stuck_at.is_(None)
    due = (
        select(_c.id)
        .where(_c.state.in_([s.value for s in states]), lane, _c.next_attempt_at <= now, free)
        .order_by(_c.next_attempt_at)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)
    ids = list(session.execute(due).scalars())
    if not ids:
        return []
    claimed = session.execute(
        update(_t)
        .where(_c.id.in_(ids), _c.state.in_([s.value for s in states]), free)
        .values(
            lease_owner=lease_owner,
            lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
            updated_at=now,
        )
        .returning(_c.id)
    )
    return list(claimed.scalars())


# --- terminal transitions (with the ledger, in one transaction) --------------------------


_SETTLE_COLUMNS = (
    _c.reservation_id,
    _c.provider_account_id,
    _c.provider_share_bps,
    _c.has_artifact_contract,
)


@lru_cache(maxsize=8)
def _finish_statement(columns: tuple[str, ...]) -> Any:
    """The terminal UPDATE for one set of changed columns, built once (see `_finish`)."""
    return (
        update(_t)
        .where(_held(bindparam("finish_id"), bindparam("finish_owner")))
        .values(
            lease_owner=None,
            lease_expires_at=None,
            next_attempt_at=None,
            **{name: bindparam(name, type_=_c[name].type) for name in columns},
        )
        .returning(*_VIEW_COLUMNS, *_SETTLE_COLUMNS)
    )


def _finish(
    session: Session,
    invocation_id: str,
    lease_owner: str,
    values: dict[str, Any],
) -> tuple[InvocationView, Sequence[Any]] | None:
    """Move a held invocation to its terminal state; its view and ledger facts, or None when
    the lease was lost. The view comes back from the UPDATE itself (no second read)."""
    stmt = _finish_statement(tuple(sorted(values)))
    row = session.execute(
        stmt, {"finish_id": invocation_id, "finish_owner": lease_owner, **values}
    ).first()
    if row is None:
        return None
    width = len(_VIEW_COLUMNS)
    return _view(row[:width]), row[width:]


def finish_success(
    session: Session,
    *,
    invocation_id: str,
    lease_owner: str,
    result: bytes,
    artifacts: list[dict[str, Any]] | None,
    now: dt.datetime,
) -> InvocationView | None:
    """SUCCEEDED: charge the reservation (and record the artifact manifest); once only.

    Returns the invocation as this transaction leaves it, or None when the lease was lost.
    On PostgreSQL, without a manifest to record, this is one statement (`invocation_settle`;
    `Database.statement()` runs it without BEGIN or COMMIT)."""
    if settles_in_one_statement(session.get_bind().dialect.name, artifacts):
        return _settle_on_server(session, invocation_id, lease_owner, result, artifacts, now)
    finished = _finish(
        session,
        invocation_id,
        lease_owner,
        {
            "state": State.SUCCEEDED.value,
            "settlement": Settlement.SETTLED.value,
            "result": result,
            "artifacts": artifacts,
            "settled_at": now,
            "updated_at": now,
        },
    )
    if finished is None:
        return None
    view, (reservation_id, provider_account_id, share_bps, has_artifacts) = finished
    if has_artifacts and artifacts:
        _record_manifest(session, invocation_id, artifacts, now)
    # Last: the ledger locks the balances every concurrent settlement waits on.
    ledger.settle(
        session,
        reservation_id=reservation_id,
        provider_account_id=provider_account_id,
        provider_share_bps=share_bps,
        now=now,
        savepoint=False,  # this transaction is all or nothing
    )
    return view


# (The column names come from `_VIEW_COLUMNS`, not from any input.)
_SETTLE_ON_SERVER = (
    text(
        "SELECT "  # noqa: S608
        + ", ".join(column.name for column in _VIEW_COLUMNS)
        + " FROM invocation_settle(CAST(:id AS text), CAST(:lease_owner AS text), "
        "CAST(:active AS text[]), :result, CAST(:artifacts AS json), :now, "
        "CAST(:transfer_id AS text), CAST(:entry_ids AS text[]), "
        "CAST(:new_account_ids AS text[]))"
    )
    .bindparams(bindparam("result", type_=LargeBinary()), bindparam("now", type_=UTCDateTime()))
    .columns(*_VIEW_COLUMNS)
)
_ACTIVE = [state.value for state in ACTIVE_STATES]


def _settle_on_server(
    session: Session,
    invocation_id: str,
    lease_owner: str,
    result: bytes,
    artifacts: list[dict[str, Any]] | None,
    now: dt.datetime,
) -> InvocationView | None:
    params = {
        "id": invocation_id,
        "lease_owner": lease_owner,
        "active": _ACTIVE,
        "result": result,
        "artifacts": None if artifacts is None else orjson.dumps(artifacts).decode(),
        "now": now,
        **ledger.server_transfer_ids(),
    }
    try:
        row = session.execute(_SETTLE_ON_SERVER, params).first()
    except DBAPIError as error:
        sqlstate, detail = _raised(error)
        refusal = ledger.server_refusal(sqlstate, detail, amount=0)
        if refusal is not None:
            raise refusal from None
        raise
    return None if row is None else _view(row)


def _record_manifest(
    session: Session, invocation_id: str, entries: list[dict[str, Any]], now: dt.datetime
) -> None:
    artifact_service.record_manifest(session, invocation_id=invocation_id, entries=entries, now=now)


def finish_failure(
    session: Session,
    *,
    invocation_id: str,
    lease_owner: str,
    error_code: str,
    provider_http_status: int | None,
    now: dt.datetime,
) -> InvocationView | None:
    """FAILED (defined failure or platform-side): release the reservation; once only.

    Returns the invocation as this transaction leaves it, or None when the lease was lost."""
    finished = _finish(
        session,
        invocation_id,
        lease_owner,
        {
            "state": State.FAILED.value,
            "settlement": Settlement.RELEASED.value,
            "error_code": error_code,
            "provider_http_status": provider_http_status,
            "settled_at": now,
            "updated_at": now,
        },
    )
    if finished is None:
        return None
    view, settle_facts = finished
    ledger.release(session, reservation_id=settle_facts[0], now=now, savepoint=False)
    return view


# --- stuck calls and staff resolutions (decisions 0201, 0202) ---------------------------

REASON_MAX = 2000
STUCK_LIST_MAX = 1000


def list_stuck(session: Session, *, limit: int = STUCK_LIST_MAX) -> list[StuckCall]:
    """Pending calls marked stuck, oldest acceptance first."""
    rows = session.execute(
        select(_c.id, _c.service_code, _c.version, _c.created_at, _c.reconciliations, _c.stuck_at)
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
    values: dict[str, Any] = {
        "state": State.SUCCEEDED.value if succeeded else State.FAILED.value,
        "settlement": Settlement.SETTLED.value if succeeded else Settlement.RELEASED.value,
        "error_code": None if succeeded else UNAVAILABLE,
        "settled_at": now,
        "updated_at": now,
        "resolution_decision": decision.value,
        "resolution_reason": reason,
        "resolved_by": actor[:64],
        "resolved_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
        "next_attempt_at": None,
    }
    row = session.execute(
        update(_t)
        .where(_c.id == invocation_id, _c.state.in_(_ACTIVE))
        .values(**values)
        .returning(*_VIEW_COLUMNS, *_SETTLE_COLUMNS)
    ).first()
    if row is None:
        raise _not_resolvable(session, invocation_id)
    width = len(_VIEW_COLUMNS)
    view = _view(row[:width])
    reservation_id, provider_account_id, share_bps, _ = row[width:]
    if succeeded:
        ledger.settle(
            session,
            reservation_id=reservation_id,
            provider_account_id=provider_account_id,
            provider_share_bps=share_bps,
            now=now,
            savepoint=False,
        )
    else:
        ledger.release(session, reservation_id=reservation_id, now=now, savepoint=False)
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
    if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH or not all("!" <= ch <= "~" for ch in key):
        raise IdempotencyKeyInvalid("The Idempotency-Key must be 1-191 visible ASCII characters.")
    return key
