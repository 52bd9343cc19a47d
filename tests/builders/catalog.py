"""Builders for the catalog: the example contract, provider connections, published versions."""

from __future__ import annotations

import copy
from typing import Any

from builders.accounts import make_account
from mercato.catalog import service as catalog
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.schemas import CheckVerdict

SERVICE_CODE = "pixiv.daily-ranking"
DISPLAY_NAME = "pixiv daily ranking"

# The spec 2.2 example version's input: vetted adapter, 64 KiB / 256 KiB, closed
# installation-config schema, open request and result schemas (the request's three members
# bounded, decision 0205), with an artifact contract.
EXAMPLE_CONTRACT: dict[str, Any] = {
    "adapterRef": "vetted.http-json/v1",
    "installationConfigSchema": {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    },
    "presentationContractRef": "",
    "presentationContractDigest": "",
    "providerOutcomes": [
        "SUCCEEDED",
        "DEFINED_FAILURE",
        "RETRYABLE_BEFORE_ACCEPT",
        "UNKNOWN_OUTCOME",
    ],
    "requestMaxBytes": 65536,
    "requestSchema": {
        "type": "object",
        "properties": {
            "chart": {"enum": ["overall", "illust", "manga"]},
            "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 500, "default": 50},
            "snapshotId": {"type": ["string", "null"]},
        },
        "required": ["chart"],
        "additionalProperties": True,
    },
    "requestShape": {
        "chart": "string: overall | illust | manga",
        "limit": "integer 1-500, default 50",
        "snapshotId": "string, optional",
    },
    "responseMaxBytes": 262144,
    "resultSchema": {"type": "object", "additionalProperties": True},
    "artifactContract": {
        "fetch": "GET /v1/artifacts/{digest}",
        "digestAlgorithm": "sha256",
        "manifestMember": "artifacts",
        "mediaTypes": ["image/gif", "image/jpeg", "image/png", "image/webp"],
    },
}


def example_contract(**changes: Any) -> dict[str, Any]:
    """A deep copy of the example contract with some members replaced (None removes one)."""
    contract = copy.deepcopy(EXAMPLE_CONTRACT)
    for name, value in changes.items():
        if value is None:
            contract.pop(name, None)
        else:
            contract[name] = value
    return contract


def make_connection(
    runtime: Runtime,
    owner_id: str,
    *,
    name: str = "daily-ranking",
    approved: bool = True,
) -> str:
    """Submit a connection for `owner_id` and, unless told not to, pass it and approve it."""
    now = utcnow()
    with runtime.db.transaction() as session:
        connection = providers.create_connection(
            session,
            owner_id=owner_id,
            name=name,
            base_url="http://127.0.0.1:9",
            credential="test-credential-0123456789abcdef",
            settings=runtime.settings,
            now=now,
        )
        connection_id = connection.id
    if approved:
        approve_connection(runtime, connection_id)
    return connection_id


def approve_connection(runtime: Runtime, connection_id: str) -> None:
    """Record an all-passed conformance run on the current revision and approve it."""
    now = utcnow()
    checks = [
        CheckVerdict(position=i, name=f"check-{i}", status="passed", detail={})
        for i in range(1, 10)
    ]
    with runtime.db.transaction() as session:
        connection = providers.get_connection(session, connection_id=connection_id)
        providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=connection.revision,
            started_at=now,
            finished_at=now,
            checks=checks,
        )
        providers.approve_connection(session, connection_id=connection_id, now=now)


def facts(runtime: Runtime, connection_id: str) -> catalog.ConnectionFacts:
    """What the edge would read about a connection before publishing."""
    with runtime.db.read() as session:
        connection = providers.get_connection(session, connection_id=connection_id)
        return catalog.ConnectionFacts(
            connection_id=connection.id,
            owner_id=connection.owner_id,
            approved=providers.is_approved(session, connection_id=connection_id),
        )


def make_provider(runtime: Runtime, email: str = "provider@example.com") -> tuple[str, str]:
    """A provider account with an approved connection: (account id, connection id)."""
    owner_id = make_account(runtime.db, email, password=None)
    return owner_id, make_connection(runtime, owner_id)


def publish(
    runtime: Runtime,
    connection_id: str,
    *,
    service_code: str = SERVICE_CODE,
    version: str = "v1",
    price: int = 10,
    display_name: str = DISPLAY_NAME,
    contract: dict[str, Any] | None = None,
    description: str | None = "Daily chart snapshots.",
    provider_share_bps: int | None = None,
) -> catalog.PublishResult:
    """Publish one version through the one-step operator path."""
    connection = facts(runtime, connection_id)
    with runtime.db.transaction() as session:
        return catalog.publish(
            session,
            service_code=service_code,
            display_name=display_name,
            version=version,
            connection=connection,
            price=price,
            contract=example_contract() if contract is None else contract,
            description=description,
            provider_share_bps=provider_share_bps,
            now=runtime.clock.now(),
        )


def hold(runtime: Runtime, service_code: str = SERVICE_CODE, *, reason: str = "review") -> str:
    with runtime.db.transaction() as session:
        return catalog.place_hold(
            session,
            service_code=service_code,
            kind="staff",
            reason=reason,
            created_by="staff:test",
            now=runtime.clock.now(),
        )


def release(runtime: Runtime, hold_id: str) -> None:
    with runtime.db.transaction() as session:
        catalog.release_hold(
            session, hold_id=hold_id, released_by="staff:test", now=runtime.clock.now()
        )
