"""Case values and their JSON form."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any


class Kind(enum.StrEnum):
    DISPUTE = "DISPUTE"
    CONTENT_REPORT = "CONTENT_REPORT"


class CaseState(enum.StrEnum):
    OPEN = "OPEN"
    APPROVED = "APPROVED"  # dispute: decided; refund not yet posted
    REFUNDED = "REFUNDED"  # dispute: the ledger refund has posted
    DENIED = "DENIED"
    UPHELD = "UPHELD"  # report: a `report` hold keeps the listing out of the catalog
    DISMISSED = "DISMISSED"


class Category(enum.StrEnum):
    """What a content report says is wrong with a publication (decision 0102)."""

    ILLEGAL = "ILLEGAL"
    INFRINGEMENT = "INFRINGEMENT"
    MISLEADING = "MISLEADING"
    MALICIOUS = "MALICIOUS"
    OTHER = "OTHER"


class Decision(enum.StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    UPHOLD = "uphold"
    DISMISS = "dismiss"


# decision -> (the kind it applies to, the state it leads to)
DECISIONS: dict[Decision, tuple[Kind, CaseState]] = {
    Decision.APPROVE: (Kind.DISPUTE, CaseState.APPROVED),
    Decision.DENY: (Kind.DISPUTE, CaseState.DENIED),
    Decision.UPHOLD: (Kind.CONTENT_REPORT, CaseState.UPHELD),
    Decision.DISMISS: (Kind.CONTENT_REPORT, CaseState.DISMISSED),
}


def _time(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class CaseView:
    """A snapshot of one case row."""

    case_id: str
    kind: str
    state: str
    account_id: str
    idempotency_key: str
    fingerprint: str
    statement: str
    invocation_id: str | None
    service_code: str | None
    version: str | None
    category: str | None
    decided_by: str | None
    decided_at: dt.datetime | None
    decision_reason: str | None
    refund_attempts: int
    refund_next_attempt_at: dt.datetime | None
    refund_last_error: str | None
    refunded_at: dt.datetime | None
    hold_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime

    def to_json(self, *, for_staff: bool) -> dict[str, Any]:
        """The case document; the submitter never sees who decided or any internal ids."""
        body: dict[str, Any] = {
            "caseId": self.case_id,
            "kind": self.kind,
            "state": self.state,
            "idempotencyKey": self.idempotency_key,
            "createdAt": _time(self.created_at),
            "updatedAt": _time(self.updated_at),
        }
        if self.kind == Kind.DISPUTE:
            body.update(invocationId=self.invocation_id, reason=self.statement)
            body["refund"] = {
                "pending": self.state == CaseState.APPROVED,
                "refundedAt": _time(self.refunded_at),
            }
        else:
            body.update(
                serviceCode=self.service_code,
                version=self.version,
                category=self.category,
                text=self.statement,
            )
        body["decision"] = None
        if self.decided_at is not None:
            body["decision"] = {"reason": self.decision_reason, "decidedAt": _time(self.decided_at)}
        if for_staff:
            body["submittedBy"] = self.account_id
            if body["decision"] is not None:
                body["decision"]["decidedBy"] = self.decided_by
            if self.kind == Kind.DISPUTE:
                body["refund"].update(
                    attempts=self.refund_attempts,
                    nextAttemptAt=_time(self.refund_next_attempt_at),
                    lastError=self.refund_last_error,
                )
            else:
                body["holdId"] = self.hold_id
        return body


@dataclass(frozen=True, slots=True)
class Submission:
    """A case submission as it arrived: who, with which key, and the fingerprinted body."""

    account_id: str
    idempotency_key: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Submitted:
    case: CaseView
    created: bool


@dataclass(frozen=True, slots=True)
class Page:
    items: list[CaseView]
    next_cursor: str | None
