"""Invocation values and their JSON forms (receipts, invoke responses)."""

from __future__ import annotations

import datetime as dt
import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import repeat
from operator import call
from typing import Any

import orjson


class State(enum.StrEnum):
    """Where one call intent is; see docs/invocation-lifecycle.md."""

    DISPATCHING = "DISPATCHING"  # accepted; the lease holder is (or was) sending it
    RETRY_WAIT = "RETRY_WAIT"  # provider proved non-acceptance; may be sent again when due
    RECONCILING = "RECONCILING"  # outcome unknown; only reconciliation may decide
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


ACTIVE_STATES = (State.DISPATCHING, State.RETRY_WAIT, State.RECONCILING)


class Settlement(enum.StrEnum):
    PENDING = "PENDING"
    SETTLED = "SETTLED"
    RELEASED = "RELEASED"
    REFUNDED = "REFUNDED"


PUBLIC_STATUSES = ("PENDING", "SUCCEEDED", "FAILED")

CONTRACT_VIOLATION = "PROVIDER_CONTRACT_VIOLATION"
UNAVAILABLE = "PROVIDER_UNAVAILABLE"


def public_status(state: str) -> str:
    """The receipt status: PENDING until a terminal state is reached."""
    return state if state in (State.SUCCEEDED, State.FAILED) else "PENDING"


def _time(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class InvocationView:
    """A snapshot of one invocation row: what receipts and invoke responses are built from."""

    invocation_id: str
    account_id: str
    service_code: str
    version: str
    contract_digest: str
    state: str
    settlement: str
    price: int
    has_artifact_contract: bool
    idempotency_key: str
    fingerprint: str
    channel: str
    error_code: str | None
    provider_http_status: int | None
    result: bytes | None
    artifacts: list[dict[str, Any]] | None
    lease_expires_at: dt.datetime | None
    created_at: dt.datetime
    settled_at: dt.datetime | None
    refunded_at: dt.datetime | None
    resolution_decision: str | None = None
    resolution_reason: str | None = None
    resolved_at: dt.datetime | None = None

    @property
    def pending(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def actual_spend(self) -> int | None:
        if self.settlement == Settlement.PENDING:
            return None
        return self.price if self.settlement == Settlement.SETTLED else 0

    def resolution(self) -> dict[str, Any] | None:
        """Staff's decision on a call whose outcome stayed unknown (never who decided)."""
        if self.resolution_decision is None:
            return None
        return {
            "decision": self.resolution_decision,
            "reason": self.resolution_reason,
            "resolvedAt": _time(self.resolved_at),
        }

    def manifest(self) -> list[dict[str, Any]]:
        return list(self.artifacts or [])

    def receipt(self) -> dict[str, Any]:
        """The receipt (DESIGN.md §3): never the provider, the split or any party's identity."""
        return {
            "invocationId": self.invocation_id,
            "serviceCode": self.service_code,
            "version": self.version,
            "contractDigest": self.contract_digest,
            "status": public_status(self.state),
            "settlement": self.settlement,
            "listedPrice": self.price,
            "actualSpend": self.actual_spend,
            "createdAt": _time(self.created_at),
            "settledAt": _time(self.settled_at),
            "refundedAt": _time(self.refunded_at),
            "errorCode": self.error_code,
            "artifacts": self.manifest(),
            "idempotencyKey": self.idempotency_key,
            "channel": self.channel,
            "resolution": self.resolution(),
        }

    def success_body(self) -> dict[str, Any]:
        """The 200 body of a settled call; the same for every replay."""
        body: dict[str, Any] = {
            "invocationId": self.invocation_id,
            "result": orjson.loads(self.result) if self.result is not None else None,
        }
        if self.has_artifact_contract:
            body["artifacts"] = self.manifest()
        return body

    def pending_body(self) -> dict[str, Any]:
        return {
            "invocationId": self.invocation_id,
            "status": "PENDING",
            "settlement": self.settlement,
            "receipt": f"/v1/invocations/{self.invocation_id}",
        }


_VIEW_SETTERS = tuple(getattr(InvocationView, f.name).__set__ for f in fields(InvocationView))
_new = object.__new__


def view_of(row: Sequence[Any]) -> InvocationView:
    """`InvocationView(*row)` for a row of every field's value, in field order.

    The instance is the same, its fields set through the slots' own descriptors: a frozen
    dataclass's `__init__` sets each field by `object.__setattr__`, which looks the name up
    again (about 1,400 instructions a field in CPython 3.11, 23 fields a view); the
    descriptors' setters, called from C by `map`, take about half (decision 0473)."""
    if len(row) != len(_VIEW_SETTERS):
        return InvocationView(*row)
    view = _new(InvocationView)
    deque(map(call, _VIEW_SETTERS, repeat(view), row), 0)
    return view


class Decision(enum.StrEnum):
    """How staff resolve a call whose outcome is unknown: settle it or release it."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class Address:
    """Where one send went: the connection revision, its base URL and an HMAC of the
    credential sent (None when not known: attempts recorded before migration 0010)."""

    connection_revision: int
    base_url: str
    credential_digest: str | None


@dataclass(frozen=True, slots=True)
class StuckCall:
    """One stuck call as operators see it."""

    invocation_id: str
    service_code: str
    version: str
    accepted_at: dt.datetime
    attempts: int
    stuck_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "invocationId": self.invocation_id,
            "serviceCode": self.service_code,
            "version": self.version,
            "acceptedAt": _time(self.accepted_at),
            "attempts": self.attempts,
        }


@dataclass(frozen=True, slots=True)
class Page:
    items: list[InvocationView]
    next_cursor: str | None
