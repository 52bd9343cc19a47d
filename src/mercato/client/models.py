"""Typed values the client returns, parsed from the caller API's JSON (DESIGN.md §3, §6)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _time(value: Any) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(str(value))


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list; pass `next_cursor` back to get the next (None: this was the last)."""

    items: tuple[T, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class VersionSummary:
    version: str
    price: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VersionSummary:
        return cls(version=data["version"], price=int(data["price"]))


@dataclass(frozen=True, slots=True)
class ListingSummary:
    service_code: str
    display_name: str
    versions: tuple[VersionSummary, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ListingSummary:
        return cls(
            service_code=data["serviceCode"],
            display_name=data["displayName"],
            versions=tuple(VersionSummary.from_json(v) for v in data.get("versions", [])),
        )


@dataclass(frozen=True, slots=True)
class Listing:
    service_code: str
    display_name: str
    description: str
    versions: tuple[VersionSummary, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Listing:
        return cls(
            service_code=data["serviceCode"],
            display_name=data["displayName"],
            description=data.get("description") or "",
            versions=tuple(VersionSummary.from_json(v) for v in data.get("versions", [])),
        )


@dataclass(frozen=True, slots=True)
class Version:
    """One exact published version; everything in it is frozen at publication."""

    service_code: str
    version: str
    display_name: str
    price: int
    contract_digest: str
    has_artifact_contract: bool
    request_max_bytes: int
    response_max_bytes: int
    published_at: dt.datetime | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Version:
        return cls(
            service_code=data["serviceCode"],
            version=data["version"],
            display_name=data["displayName"],
            price=int(data["price"]),
            contract_digest=data["contractDigest"],
            has_artifact_contract=bool(data["hasArtifactContract"]),
            request_max_bytes=int(data["requestMaxBytes"]),
            response_max_bytes=int(data["responseMaxBytes"]),
            published_at=_time(data.get("publishedAt")),
        )


@dataclass(frozen=True, slots=True)
class Contract:
    """A version's contract (spec 2.2); `document` is the whole JSON object as served."""

    service_code: str
    version: str
    contract_digest: str
    has_artifact_contract: bool
    request_schema: dict[str, Any]
    result_schema: dict[str, Any]
    request_max_bytes: int
    response_max_bytes: int
    document: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Contract:
        return cls(
            service_code=data["serviceCode"],
            version=data["version"],
            contract_digest=data["contractDigest"],
            has_artifact_contract=bool(data["hasArtifactContract"]),
            request_schema=dict(data["requestSchema"]),
            result_schema=dict(data["resultSchema"]),
            request_max_bytes=int(data["requestMaxBytes"]),
            response_max_bytes=int(data["responseMaxBytes"]),
            document=dict(data),
        )


@dataclass(frozen=True, slots=True)
class ArtifactEntry:
    """One manifest entry: download it with `download_artifact`, verified against `digest`."""

    artifact_id: str
    digest: str
    media_type: str | None
    size: int | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactEntry:
        size = data.get("size")
        return cls(
            artifact_id=data["artifactId"],
            digest=str(data["digest"]).lower(),
            media_type=data.get("mediaType"),
            size=int(size) if size is not None else None,
        )


def _manifest(data: Any) -> tuple[ArtifactEntry, ...]:
    return tuple(ArtifactEntry.from_json(e) for e in (data or []))


@dataclass(frozen=True, slots=True)
class InvocationResult:
    """A settled successful call: its result, manifest, and the key that identifies it."""

    invocation_id: str
    result: dict[str, Any]
    artifacts: tuple[ArtifactEntry, ...]
    idempotency_key: str

    @classmethod
    def from_json(cls, data: dict[str, Any], *, idempotency_key: str) -> InvocationResult:
        result = data.get("result")
        return cls(
            invocation_id=data["invocationId"],
            result=dict(result) if isinstance(result, dict) else {},
            artifacts=_manifest(data.get("artifacts")),
            idempotency_key=idempotency_key,
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    """Staff's decision on a call whose outcome stayed unknown: SUCCEEDED or FAILED."""

    decision: str
    reason: str
    resolved_at: dt.datetime | None

    @classmethod
    def from_json(cls, data: Any) -> Resolution | None:
        if not isinstance(data, dict):
            return None
        return cls(
            decision=data["decision"],
            reason=data["reason"],
            resolved_at=_time(data.get("resolvedAt")),
        )


@dataclass(frozen=True, slots=True)
class Receipt:
    """A call's receipt (spec 2.8): `actual_spend` is None while the settlement is pending."""

    invocation_id: str
    service_code: str
    version: str
    contract_digest: str
    status: str
    settlement: str
    listed_price: int
    actual_spend: int | None
    created_at: dt.datetime | None
    settled_at: dt.datetime | None
    refunded_at: dt.datetime | None
    error_code: str | None
    artifacts: tuple[ArtifactEntry, ...]
    idempotency_key: str
    channel: str
    resolution: Resolution | None = None

    @property
    def pending(self) -> bool:
        return self.status == "PENDING"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Receipt:
        spend = data.get("actualSpend")
        return cls(
            invocation_id=data["invocationId"],
            service_code=data["serviceCode"],
            version=data["version"],
            contract_digest=data["contractDigest"],
            status=data["status"],
            settlement=data["settlement"],
            listed_price=int(data["listedPrice"]),
            actual_spend=int(spend) if spend is not None else None,
            created_at=_time(data.get("createdAt")),
            settled_at=_time(data.get("settledAt")),
            refunded_at=_time(data.get("refundedAt")),
            error_code=data.get("errorCode"),
            artifacts=_manifest(data.get("artifacts")),
            idempotency_key=data["idempotencyKey"],
            channel=data["channel"],
            resolution=Resolution.from_json(data.get("resolution")),
        )


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The caller's current quota window (spec 2.6)."""

    policy: str
    limit: int
    window_seconds: int
    accepted: int
    remaining: int
    reset_at: dt.datetime | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RateLimit:
        return cls(
            policy=data["policy"],
            limit=int(data["limit"]),
            window_seconds=int(data["windowSeconds"]),
            accepted=int(data["accepted"]),
            remaining=int(data["remaining"]),
            reset_at=_time(data.get("resetAt")),
        )


@dataclass(frozen=True, slots=True)
class Balance:
    available: int
    reserved: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Balance:
        return cls(available=int(data["available"]), reserved=int(data["reserved"]))
