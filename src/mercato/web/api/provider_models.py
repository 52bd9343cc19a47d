"""Request and response documents of the provider and staff review API (DESIGN §7)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mercato.catalog.contracts import contract_input
from mercato.catalog.lifecycle import TransitionView
from mercato.catalog.models import Listing, Version
from mercato.ledger.split import provider_leg
from mercato.providers.models import ProviderConnection
from mercato.providers.schemas import RunView

VersionState = Literal["DRAFT", "SUBMITTED", "APPROVED", "CHANGES_REQUESTED", "PUBLISHED"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConnectionBody(_Body):
    name: str = Field(min_length=1, max_length=100)
    baseUrl: str = Field(min_length=1, max_length=2048)
    credential: str = Field(min_length=1, max_length=1024)


class ConnectionChange(_Body):
    """What a provider may change of a connection without a new revision."""

    maxInFlight: int | None = Field(
        strict=True,  # a number: no "5", no true, no 5.0
        description=(
            "Calls in flight per serve process, 1 to the platform's ceiling; null: the "
            "platform's default. Not a new revision: approval is kept."
        ),
    )


class ListingBody(_Body):
    serviceCode: str = Field(min_length=1, max_length=100)
    displayName: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    publisherName: str | None = Field(
        default=None,
        max_length=100,
        description="The name callers see the listing published under (decision 0560).",
    )


class ListingChange(_Body):
    """What a provider may change of a listing at any time."""

    publisherName: str | None = Field(max_length=100, description="null or blank: no name.")


class VersionBody(_Body):
    version: str = Field(min_length=1, max_length=20)
    connectionId: str = Field(min_length=1, max_length=40)
    price: int
    contract: dict[str, Any]
    examples: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=3,
        description=(
            'Shown on the listing page: [{"request", "result"}], each matching the contract\'s '
            "schemas and byte limits (422 INVALID_EXAMPLE otherwise; decision 0561)."
        ),
    )


class VersionChange(_Body):
    """Members to change on an unpublished version; a change after submission makes it DRAFT."""

    connectionId: str | None = Field(default=None, min_length=1, max_length=40)
    price: int | None = None
    contract: dict[str, Any] | None = None
    examples: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=3,
        description=(
            'Shown on the listing page: [{"request", "result"}], each matching the contract\'s '
            "schemas and byte limits (422 INVALID_EXAMPLE otherwise; decision 0561)."
        ),
    )


class ReasonBody(_Body):
    reason: str = Field(max_length=2000)


class CheckOut(BaseModel):
    position: int
    name: str
    status: Literal["passed", "failed", "skipped"]
    detail: dict[str, Any] = Field(description="Evidence: statuses, outcomes, timing; no secret.")


class RunOut(BaseModel):
    runId: str
    connectionRevision: int
    startedAt: dt.datetime
    finishedAt: dt.datetime
    passed: bool
    checks: list[CheckOut]

    @classmethod
    def of(cls, run: RunView) -> RunOut:
        return cls(
            runId=run.run_id,
            connectionRevision=run.connection_revision,
            startedAt=run.started_at,
            finishedAt=run.finished_at,
            passed=run.passed,
            checks=[
                CheckOut(position=c.position, name=c.name, status=c.status, detail=c.detail)
                for c in run.checks
            ],
        )


class ConnectionOut(BaseModel):
    """A connection as its owner sees it; the credential is never shown again."""

    connectionId: str
    name: str
    baseUrl: str
    revision: int
    approved: bool
    maxInFlight: int | None = Field(
        description="Its own bound on calls in flight per serve process; null: the default."
    )
    createdAt: dt.datetime
    updatedAt: dt.datetime
    latestRun: RunOut | None = Field(description="The most recent run, on any revision.")

    @classmethod
    def of(cls, connection: ProviderConnection, run: RunView | None) -> ConnectionOut:
        return cls(
            connectionId=connection.id,
            name=connection.name,
            baseUrl=connection.base_url,
            revision=connection.revision,
            approved=connection.approved,
            maxInFlight=connection.max_in_flight,
            createdAt=connection.created_at,
            updatedAt=connection.updated_at,
            latestRun=None if run is None else RunOut.of(run),
        )


class ConnectionList(BaseModel):
    items: list[ConnectionOut]


class VersionSummaryOut(BaseModel):
    versionId: str
    version: str
    state: VersionState
    price: int


class ListingOut(BaseModel):
    serviceCode: str
    displayName: str
    description: str
    publisherName: str | None = Field(description="The name callers see; null: not named.")
    providerShareBps: int = Field(description="Your share of each call's price, basis points.")
    versions: list[VersionSummaryOut]

    @classmethod
    def of(cls, listing: Listing, versions: list[Version]) -> ListingOut:
        return cls(
            serviceCode=listing.service_code,
            displayName=listing.display_name,
            description=listing.description,
            publisherName=listing.publisher_name,
            providerShareBps=listing.provider_share_bps,
            versions=[
                VersionSummaryOut(versionId=v.id, version=v.label, state=v.state, price=v.price)
                for v in versions
            ],
        )


class ListingList(BaseModel):
    items: list[ListingOut]


class TransitionOut(BaseModel):
    fromState: VersionState | None
    toState: VersionState
    role: Literal["provider", "staff", "operator"]
    reason: str
    runId: str | None = Field(description="The conformance run the step was taken on.")
    at: dt.datetime

    @classmethod
    def of(cls, step: TransitionView) -> TransitionOut:
        return cls.model_validate(
            {
                "fromState": step.from_state,
                "toState": step.to_state,
                "role": step.role,
                "reason": step.reason,
                "runId": step.run_id,
                "at": step.at,
            }
        )


class EarningsOut(BaseModel):
    pointsPerCall: int = Field(
        description="What you receive per settled call: price × share ÷ 10000, rounded down."
    )
    providerShareBps: int
    earnedPoints: int = Field(description="Points this version has earned you (the ledger's).")


class VersionOut(BaseModel):
    versionId: str
    serviceCode: str
    version: str
    state: VersionState
    price: int
    connectionId: str
    contract: dict[str, Any] = Field(description="The contract as written (no computed members).")
    contractDigest: str
    hasArtifactContract: bool
    examples: list[dict[str, Any]] | None = Field(
        description='The example [{"request", "result"}] shown on the listing page, or null.'
    )
    submittedRunId: str | None
    reviewReason: str | None = Field(description="Staff's reason when changes were requested.")
    earnings: EarningsOut
    transitions: list[TransitionOut]
    createdAt: dt.datetime
    updatedAt: dt.datetime
    publishedAt: dt.datetime | None

    @classmethod
    def of(
        cls, listing: Listing, version: Version, steps: list[TransitionView], earned: int
    ) -> VersionOut:
        reason = None
        if version.state == "CHANGES_REQUESTED" and steps:
            reason = steps[-1].reason
        return cls.model_validate(
            {
                "versionId": version.id,
                "serviceCode": listing.service_code,
                "version": version.label,
                "state": version.state,
                "price": version.price,
                "connectionId": version.connection_id,
                "contract": contract_input(version.contract),
                "contractDigest": version.contract_digest,
                "hasArtifactContract": version.has_artifact_contract,
                "examples": version.examples,
                "submittedRunId": version.submitted_run_id,
                "reviewReason": reason,
                "earnings": {
                    "pointsPerCall": provider_leg(version.price, listing.provider_share_bps),
                    "providerShareBps": listing.provider_share_bps,
                    "earnedPoints": earned,
                },
                "transitions": [TransitionOut.of(step) for step in steps],
                "createdAt": version.created_at,
                "updatedAt": version.updated_at,
                "publishedAt": version.published_at,
            }
        )


class ContractSchemaOut(BaseModel):
    """A JSON Schema (draft 2020-12) document."""

    model_config = ConfigDict(extra="allow")
