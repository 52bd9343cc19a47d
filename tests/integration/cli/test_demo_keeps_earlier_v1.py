"""`mercato up` on a data dir whose `v1` was published with an earlier release's contract.

A published version never changes (DESIGN.md §6), so a later run keeps serving that `v1`
rather than stop with VERSION_IMMUTABLE; an empty data dir gets today's contract.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders.accounts import make_account
from builders.invocations import ServerThread
from builders.provider import CountingHandler
from mercato.catalog import service as catalog
from mercato.catalog.examples import example_contract
from mercato.cli.commands_catalog import connection_facts
from mercato.cli.demo_up import (
    CONNECTION_NAME,
    DESCRIPTION,
    DISPLAY_NAME,
    PRICE,
    PROVIDER_EMAIL,
    SERVICE_CODE,
    VERSION,
    connect_provider,
)
from mercato.conformance.flows import submit_connection
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.provider import create_provider_app
from mercato.providers import service as providers

CREDENTIAL = "demo-credential-0123456789abcdef"


@pytest.fixture
def provider_url(tmp_path: Path) -> Iterator[str]:
    app = create_provider_app(
        CountingHandler(), credential=CREDENTIAL, store=str(tmp_path / "provider.db")
    )
    with ServerThread(app) as server:
        yield server.url


def _published_contract(runtime: Runtime) -> Any:
    with runtime.db.read() as session:
        return catalog.public_version(session, service_code=SERVICE_CODE, version=VERSION).contract


def _publish_earlier_v1(runtime: Runtime, base_url: str) -> dict[str, Any]:
    """What an earlier release left: the demo's connection, approved, and v1 with an open
    request schema."""
    owner_id = make_account(runtime.db, PROVIDER_EMAIL, password=None)
    with ProviderClient(runtime.settings) as client:
        submitted = submit_connection(
            runtime,
            client,
            owner_id=owner_id,
            name=CONNECTION_NAME,
            base_url=base_url,
            credential=CREDENTIAL,
        )
    assert submitted.run is not None and submitted.run.passed
    earlier = example_contract()
    earlier["requestSchema"] = {"type": "object", "additionalProperties": True}
    with runtime.db.transaction() as session:
        now = runtime.clock.now()
        providers.approve_connection(session, connection_id=submitted.connection_id, now=now)
        catalog.publish(
            session,
            service_code=SERVICE_CODE,
            display_name=DISPLAY_NAME,
            version=VERSION,
            connection=connection_facts(session, connection_id=submitted.connection_id),
            price=PRICE,
            contract=earlier,
            description=DESCRIPTION,
            now=now,
        )
    return earlier


def test_a_later_run_keeps_a_v1_published_with_an_earlier_contract(
    runtime: Runtime, provider_url: str
) -> None:
    earlier = _publish_earlier_v1(runtime, provider_url)
    before = _published_contract(runtime)
    assert before["requestSchema"] == earlier["requestSchema"]
    assert before["requestSchema"] != example_contract()["requestSchema"]

    said: list[str] = []
    connect_provider(
        runtime.ensure_provider(ProviderClient),
        base_url=provider_url,
        credential=CREDENTIAL,
        say=said.append,
    )

    assert (
        said[-1] == f"{SERVICE_CODE} {VERSION} was published earlier with another contract (kept)"
    )
    assert _published_contract(runtime) == before


def test_an_empty_data_dir_publishes_todays_contract(runtime: Runtime, provider_url: str) -> None:
    said: list[str] = []
    connect_provider(
        runtime.ensure_provider(ProviderClient),
        base_url=provider_url,
        credential=CREDENTIAL,
        say=said.append,
    )
    assert said[-1] == f"published {SERVICE_CODE} {VERSION}"
    published = _published_contract(runtime)
    assert published["requestSchema"] == example_contract()["requestSchema"]
