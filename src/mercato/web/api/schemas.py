"""The response models of the caller API: what routes declare, and what FastAPI documents.

Field names are snake_case; the wire names are their camelCase aliases (FastAPI serialises by
alias). Routes that build their answer on a hot path (invoke, receipts) or with caching headers
(catalog) return a Response directly and declare these only for the document; a test checks
that their real answers validate against it (tests/integration/web/test_openapi.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

IDEMPOTENCY_KEY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 191},
}


class Wire(BaseModel):
    """A JSON object of the caller API (camelCase members)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class OpenWire(Wire):
    """A documented object whose further members depend on its kind."""

    model_config = ConfigDict(extra="allow")


class TokenPair(Wire):
    access_token: str
    refresh_token: str
    expires_in: int
    token_type: str = Field(examples=["Bearer"])


class Me(Wire):
    account_id: str
    email: str
    is_staff: bool
    channel: str = Field(description="SESSION (an API key cannot read /v1/me)")


class SpendLimit(Wire):
    """A key's hard spend limit (DESIGN §8): at most `points` in each `period` (UTC)."""

    model_config = ConfigDict(extra="forbid")

    points: int = Field(ge=0, le=2**53 - 1, description="Points the key may spend per period.")
    period: Literal["DAY", "WEEK", "MONTH", "TOTAL"] = Field(
        description="DAY (UTC day), WEEK (ISO week from Monday 00:00 UTC), MONTH (UTC "
        "calendar month) or TOTAL (never resets)."
    )


class CreatedApiKey(Wire):
    api_key: str = Field(description="The plaintext key; shown once, only its digest is kept.")
    key_id: str
    name: str
    created_at: str | None
    spend_limit: SpendLimit | None = None


class KeySpend(Wire):
    """A key's spend limit and its use in the current period."""

    key_id: str
    spend_limit: SpendLimit | None = Field(description="null: the key has no limit.")
    spent_in_period: int | None = Field(
        description="Points reserved or settled by the key's calls in the current period "
        "(a released call gives its points back; a refund does not); null without a limit."
    )
    period_resets_at: str | None = Field(
        description="When the use starts again from 0; null for TOTAL or without a limit."
    )


class ApiKeySummary(Wire):
    key_id: str
    name: str
    created_at: str | None
    last_used_at: str | None
    revoked_at: str | None
    spend_limit: SpendLimit | None
    spent_in_period: int | None
    period_resets_at: str | None


class ApiKeyList(Wire):
    items: list[ApiKeySummary]


class RevokedApiKey(Wire):
    key_id: str
    revoked_at: str | None


class Balance(Wire):
    available: int
    reserved: int


class RateLimitStatus(Wire):
    """Spec 2.6."""

    policy: str
    limit: int
    window_seconds: int
    accepted: int
    remaining: int
    reset_at: str


class ArtifactEntry(OpenWire):
    """One manifest entry (spec 2.9): an identifier and a content digest, and more."""

    artifact_id: str
    digest: str


class InvokeSuccess(Wire):
    """200: the settled result; `artifacts` is present when the version has an artifact
    contract. Replays with the same Idempotency-Key get the same body."""

    invocation_id: str
    result: dict[str, Any] | None
    artifacts: list[ArtifactEntry] | None = None


class InvokePending(Wire):
    """202: accepted, outcome not yet known; follow `receipt` (also the Location header)."""

    invocation_id: str
    status: str = Field(examples=["PENDING"])
    settlement: str
    receipt: str


class InvokeBody(OpenWire):
    """The payload: a non-empty JSON object matching the version's requestSchema."""


class Resolution(Wire):
    """A staff resolution of a stuck call: settled (SUCCEEDED) or released (FAILED)."""

    decision: str = Field(description="SUCCEEDED or FAILED")
    reason: str
    resolved_at: str | None


class Receipt(Wire):
    """Spec 2.8 / DESIGN §3: never the provider, the split or the parties' identities."""

    invocation_id: str
    service_code: str
    version: str
    contract_digest: str
    status: str = Field(description="PENDING, SUCCEEDED or FAILED")
    settlement: str = Field(description="PENDING, SETTLED, RELEASED or REFUNDED")
    listed_price: int
    actual_spend: int | None = Field(description="null while settlement is pending")
    created_at: str | None
    settled_at: str | None
    refunded_at: str | None
    error_code: str | None
    artifacts: list[ArtifactEntry]
    idempotency_key: str
    channel: str
    resolution: Resolution | None = Field(
        description="Staff's decision on a call whose outcome stayed unknown, else null"
    )


class ReceiptPage(Wire):
    items: list[Receipt]
    next_cursor: str | None


class CaseDocument(OpenWire):
    """A dispute (invocationId, reason, refund) or a content report (serviceCode, version,
    category, text); staff also see who submitted and decided."""

    case_id: str
    kind: str
    state: str
    idempotency_key: str
    created_at: str | None
    updated_at: str | None
    decision: dict[str, Any] | None


class CasePage(Wire):
    items: list[CaseDocument]
    next_cursor: str | None
