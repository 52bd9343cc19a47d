"""The invocation engine's money programs, each written once (`mercato.db.guarded`).

- `ACCEPT`: the hints guard (a call served from memory runs only while the hint generation
  it was served at is current: `mercato.db.hints`, decision 0400), the call intent (its
  unique (account, key) stops the program quietly for a same-key twin before anything shared
  is touched), its first attempt's address, the reservation (`rules.reserve_steps`: the
  caller's balances are locked and moved), the key's spend limit (`spend.limit_steps`), then
  the quota slot (last).
- `SETTLE`: the leased terminal UPDATE to SUCCEEDED (no row: the lease was lost, nothing
  happens), then `rules.settle_steps` on the reservation it returns.
- `RELEASE`: the leased terminal UPDATE to FAILED, then `rules.release_steps`, then the
  price back to the key's spend limit (`spend.giveback_step`).
- `RESOLVE_SETTLE` / `RESOLVE_RELEASE`: a staff resolution, conditional on the call still
  being pending whoever holds its lease, then settle or release.

On PostgreSQL each is one statement (a data-modifying CTE), so accept and settle are one round
trip each without BEGIN or COMMIT (`Database.statement()`); on SQLite the same statements run
one after another in one transaction. These are the only paths that move an invocation's
money, on both stores; the simulation, crash and concurrency suites drive them.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Integer, String, Table

from mercato.db import hints
from mercato.db.guarded import (
    Empty,
    Program,
    Refs,
    Step,
    col,
    inline,
    insert_select,
    param,
    update_where,
)
from mercato.invocations import spend
from mercato.invocations.models import Invocation, InvocationAttempt
from mercato.invocations.schemas import ACTIVE_STATES
from mercato.ledger import rules
from mercato.quotas import service as quotas

_t = cast(Table, Invocation.__table__)
_c = _t.c
_attempts = cast(Table, InvocationAttempt.__table__)

INTENT_COLUMNS = (
    "id",
    "account_id",
    "idempotency_key",
    "fingerprint",
    "channel",
    "request_id",
    "api_key_id",
    "service_code",
    "version",
    "version_id",
    "contract_digest",
    "connection_id",
    "provider_account_id",
    "provider_share_bps",
    "price",
    "has_artifact_contract",
    "response_max_bytes",
    "result_schema",
    "payload",
    "provider_key",
    "state",
    "settlement",
    "reservation_id",
    "sends",
    "reconciliations",
    "next_attempt_at",
    "lease_owner",
    "lease_expires_at",
    "created_at",
    "updated_at",
)
"""The inputs of `ACCEPT` named after the invocation's columns (each bound as `inv_<name>`)."""

_NOW = param("now", rules.TIME)

VIEW_COLUMNS = (
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
"""What an `InvocationView` is built from, in its field order."""
_ACTIVE = [inline(state.value, String) for state in ACTIVE_STATES]


def _intent(refs: Refs) -> Any:
    # A key already used (committed, or by a twin whose transaction commits first) inserts
    # nothing and stops the program quietly: the caller answers it as a replay. No error,
    # so a PostgreSQL group commit is not rolled back for it.
    values = {name: refs.param(f"inv_{name}", _c[name].type) for name in INTENT_COLUMNS}
    return insert_select(refs, _t, values).on_conflict_do_nothing().returning(_c.id)


def _first_attempt(refs: Refs) -> Any:
    a = _attempts.c
    values = {
        "invocation_id": refs.col("intent", "id"),
        "attempt": inline(1, Integer),
        "connection_revision": refs.param("connection_revision", a.connection_revision.type),
        "base_url": refs.param("base_url", a.base_url.type),
        "credential_digest": refs.param("credential_digest", a.credential_digest.type),
        "sent_at": _NOW(refs),
    }
    return insert_select(refs, _attempts, values).returning(a.attempt)


ACCEPT = Program(
    "invocation-accept",
    (
        hints.guard_step("hinted"),
        Step("intent", _intent, Empty.STOP),
        Step("attempt", _first_attempt),
        *rules.reserve_steps(
            "reserve",
            reservation_id=param("inv_reservation_id", rules.ID),
            account_id=param("inv_account_id", rules.ID),
            amount=param("reserve_amount", rules.POINTS),
            reference=param("inv_id", rules.ID),
            now=_NOW,
        ),
        # The key's spend limit (DESIGN §8): after the points, before the quota (§3's order).
        *spend.limit_steps(
            "spend",
            key_id=param("inv_api_key_id", rules.ID),
            price=param("reserve_amount", rules.POINTS),
        ),
        quotas.slot_step(
            name="quota",
            account_id=param("inv_account_id", rules.ID),
            policy=param("quota_policy", String),
            window_start=param("quota_window_start", rules.POINTS),
            limit=param("quota_limit", Integer),
        ),
    ),
    outputs=(("quota", "accepted"),),
)


# --- terminal moves ---------------------------------------------------------------------

SUCCESS_COLUMNS = ("state", "settlement", "result", "artifacts", "settled_at", "updated_at")
FAILURE_COLUMNS = (
    "state",
    "settlement",
    "error_code",
    "provider_http_status",
    "settled_at",
    "updated_at",
)
RESOLUTION_COLUMNS = (
    "state",
    "settlement",
    "error_code",
    "settled_at",
    "updated_at",
    "resolution_decision",
    "resolution_reason",
    "resolved_by",
    "resolved_at",
)


def _finish(columns: tuple[str, ...], *, leased: bool) -> Step:
    """Move an active invocation to its terminal state and clear its lease, once: held by
    `lease_owner` (`leased`), or whoever holds it (a staff resolution). No row: STOP."""

    def build(refs: Refs) -> Any:
        held = [_c.id == refs.param("id", String), _c.state.in_(_ACTIVE), refs.gate]
        if leased:
            held.append(_c.lease_owner == refs.param("lease_owner", String))
        values: dict[str, Any] = {
            name: refs.param(f"set_{name}", _c[name].type) for name in columns
        }
        cleared = {
            "lease_owner": inline(None),
            "lease_expires_at": inline(None),
            "next_attempt_at": inline(None),
        }
        return update_where(_t, {**cleared, **values}, *held).returning(
            *VIEW_COLUMNS,
            _c.reservation_id,
            _c.provider_account_id,
            _c.provider_share_bps,
            _c.api_key_id,
        )

    return Step("finish", build, Empty.STOP)


def _settled(name: str, finish: Step) -> Program:
    return Program(
        name,
        (
            finish,
            *rules.settle_steps(
                "settle",
                reservation_id=col("finish", "reservation_id"),
                provider_account_id=col("finish", "provider_account_id"),
                share_bps=col("finish", "provider_share_bps"),
                now=_NOW,
            ),
        ),
        outputs=tuple(("finish", column.key) for column in VIEW_COLUMNS),
    )


def _released(name: str, finish: Step) -> Program:
    return Program(
        name,
        (
            finish,
            *rules.release_steps(
                "release", reservation_id=col("finish", "reservation_id"), now=_NOW
            ),
            # A release gives the points back to the key's period it was accepted in (§8).
            spend.giveback_step(
                "spend_back",
                key_id=col("finish", "api_key_id"),
                price=col("finish", "price"),
                invocation_id=col("finish", "id"),
            ),
        ),
        outputs=tuple(("finish", column.key) for column in VIEW_COLUMNS),
    )


SETTLE = _settled("invocation-settle", _finish(SUCCESS_COLUMNS, leased=True))
RELEASE = _released("invocation-release", _finish(FAILURE_COLUMNS, leased=True))
RESOLVE_SETTLE = _settled("invocation-resolve-settle", _finish(RESOLUTION_COLUMNS, leased=False))
RESOLVE_RELEASE = _released("invocation-resolve-release", _finish(RESOLUTION_COLUMNS, leased=False))
