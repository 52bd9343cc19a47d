"""A platform world for operations tests: a real SDK provider process on 127.0.0.1, a published
version pointing at it, and a caller with points and a password (to log in through the API)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.accounts import DEFAULT_PASSWORD, make_account
from builders.catalog import approve_connection, example_contract, publish
from builders.provider import CREDENTIAL
from builders.provider_process import ProviderProcess
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.providers import service as providers
from mercato.settings import Settings

SERVICE = "acme.echo"
PRICE = 10
CALLER_EMAIL = "caller@example.com"
CALLER_PASSWORD = DEFAULT_PASSWORD
PROVIDER_CREDENTIAL = CREDENTIAL


def echo_contract(*, artifacts: bool) -> dict[str, Any]:
    contract = example_contract(
        requestMaxBytes=4096,
        requestSchema={"type": "object", "additionalProperties": True},
        resultSchema={"type": "object", "required": ["echo"]},
    )
    if not artifacts:
        contract.pop("artifactContract")
    else:
        contract["artifactContract"] = {
            **contract["artifactContract"],
            "mediaTypes": ["text/plain"],
        }
    return contract


@dataclass
class OpsWorld:
    settings: Settings
    caller_id: str
    provider_id: str
    connection_id: str


def start_echo_provider(workdir: Path, *, blobs: bool = False) -> ProviderProcess:
    """The SDK echo provider (`{"artifact": text}` stores one artifact when `blobs`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{workdir / 'provider-store.db'}"
    provider = ProviderProcess(store=store, workdir=workdir)
    extra = ("--blobs", str(workdir / "blobs")) if blobs else ()
    provider.start(*extra)
    return provider


def build_ops_world(
    settings: Settings, provider_url: str, *, grant: int = 1000, artifacts: bool = False
) -> OpsWorld:
    """Accounts, an approved connection to `provider_url`, a published version, points."""
    runtime = Runtime.from_settings(settings)
    try:
        caller_id = make_account(runtime.db, CALLER_EMAIL, password=CALLER_PASSWORD)
        provider_id = make_account(runtime.db, "provider@example.com", password=None)
        now = utcnow()
        with runtime.db.transaction() as session:
            ledger.grant(session, account_id=caller_id, amount=grant, now=now)
            connection = providers.create_connection(
                session,
                owner_id=provider_id,
                name="echo",
                base_url=provider_url,
                credential=PROVIDER_CREDENTIAL,
                settings=settings,
                now=now,
            )
            connection_id = connection.id
        approve_connection(runtime, connection_id)
        publish(
            runtime,
            connection_id,
            service_code=SERVICE,
            price=PRICE,
            contract=echo_contract(artifacts=artifacts),
            provider_share_bps=7000,
        )
    finally:
        runtime.db.dispose()
    return OpsWorld(settings, caller_id, provider_id, connection_id)
