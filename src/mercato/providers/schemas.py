"""Plain data handed across the providers boundary (cheap to import: no ORM, no crypto)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class DispatchTarget:
    """Where and how to call one provider connection; `credential` is the decrypted secret."""

    connection_id: str
    base_url: str
    credential: str = field(repr=False)
    approved: bool
    revision: int = 0
    max_in_flight: int | None = None
    """The connection's own bound on calls in flight per process (None: the default)."""


CheckStatus = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class CheckVerdict:
    """One conformance check's verdict; `detail` is evidence only (never a secret or a body)."""

    position: int
    name: str
    status: CheckStatus
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class RunView:
    """A stored conformance run with its verdicts in check order."""

    run_id: str
    connection_id: str
    connection_revision: int
    started_at: dt.datetime
    finished_at: dt.datetime
    passed: bool
    checks: list[CheckVerdict]
