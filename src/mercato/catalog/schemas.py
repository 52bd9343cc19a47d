"""Catalog data: plain values crossing the domain edge, and the caller-facing documents.

The documents follow DESIGN §6; the owner, the split and the connection never appear in them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from mercato.catalog.contracts import public_document
from mercato.catalog.models import Listing, Version


@dataclass(frozen=True)
class ConnectionFacts:
    """What the catalog needs to know about a provider connection, read by the caller."""

    connection_id: str
    owner_id: str
    approved: bool


@dataclass(frozen=True)
class InvocableVersion:
    """Everything invoke needs about one exact published version."""

    version_id: str
    listing_id: str
    service_code: str
    version: str
    price: int
    contract: dict[str, Any]
    contract_digest: str
    request_max_bytes: int
    response_max_bytes: int
    has_artifact_contract: bool
    connection_id: str
    provider_account_id: str
    provider_share_bps: int


@dataclass(frozen=True)
class PublishResult:
    listing: Listing
    version: Version
    created: bool  # False when an identical publication already existed


class _Document(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    def body(self) -> dict[str, Any]:
        """The JSON object a caller receives."""
        return self.model_dump(mode="json", by_alias=True)


class VersionSummary(_Document):
    version: str
    price: int


class ListingSummary(_Document):
    service_code: str
    display_name: str
    versions: list[VersionSummary]

    @classmethod
    def of(cls, listing: Listing, versions: list[Version]) -> ListingSummary:
        return cls(
            service_code=listing.service_code,
            display_name=listing.display_name,
            versions=[VersionSummary(version=v.label, price=v.price) for v in versions],
        )


class ListingDocument(ListingSummary):
    description: str

    @classmethod
    def of(cls, listing: Listing, versions: list[Version]) -> ListingDocument:
        summary = ListingSummary.of(listing, versions)
        return cls(**summary.model_dump(), description=listing.description)


class ListingPage(_Document):
    items: list[ListingSummary]
    next_cursor: str | None


class VersionDocument(_Document):
    """One exact published version; everything in it is frozen at publication."""

    service_code: str
    version: str
    display_name: str
    price: int
    contract_digest: str
    has_artifact_contract: bool
    request_max_bytes: int
    response_max_bytes: int
    published_at: dt.datetime

    @classmethod
    def of(cls, version: Version) -> VersionDocument:
        assert version.published_at is not None
        return cls(
            service_code=version.contract["serviceCode"],
            version=version.label,
            display_name=version.display_name,
            price=version.price,
            contract_digest=version.contract_digest,
            has_artifact_contract=version.has_artifact_contract,
            request_max_bytes=version.contract["requestMaxBytes"],
            response_max_bytes=version.contract["responseMaxBytes"],
            published_at=version.published_at,
        )


class ContractDocument(_Document):
    """The spec 2.2 members, then `contractDigest` and `hasArtifactContract`."""

    service_code: str
    version: str
    adapter_ref: str
    adapter_contract_digest: str
    installation_config_schema: dict[str, Any]
    installation_config_schema_digest: str
    presentation_contract_ref: str
    presentation_contract_digest: str
    provider_outcomes: list[str]
    request_max_bytes: int
    request_schema: dict[str, Any]
    request_schema_digest: str
    request_shape: dict[str, Any]
    response_max_bytes: int
    result_schema: dict[str, Any]
    result_schema_digest: str
    contract_digest: str
    has_artifact_contract: bool

    @classmethod
    def of(cls, version: Version) -> ContractDocument:
        return cls.model_validate(public_document(version.contract))
