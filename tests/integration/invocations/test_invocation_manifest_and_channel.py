"""Artifact manifests on the invoke path, and the channel recorded on the receipt."""

from __future__ import annotations

from sqlalchemy import select

from builders.accounts import DEFAULT_PASSWORD, login, make_account
from builders.catalog import example_contract, publish
from builders.invocation_world import World
from builders.invocations import Act, envelope
from mercato.core.clock import utcnow
from mercato.ledger import service as ledger
from mercato.providers.models import ProviderConnection

DIGEST = "ab" * 32


def _artifact_version(world: World) -> None:
    with world.runtime.db.read() as session:
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    publish(
        world.runtime,
        connection_id,
        service_code="acme.pics",
        price=10,
        contract=example_contract(),
    )


def test_manifest_is_returned_and_recorded(world: World) -> None:
    _artifact_version(world)
    manifest = [{"artifactId": "a1", "digest": DIGEST, "mediaType": "image/png", "size": 3}]
    world.provider.script(Act(200, envelope("SUCCEEDED", result={"artifacts": manifest})))
    response = world.invoke({"chart": "overall"}, service="acme.pics")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["artifacts"] == manifest and body["result"]["artifacts"] == manifest
    receipt = world.get(f"/v1/invocations/{body['invocationId']}").json()
    assert receipt["artifacts"] == manifest


def test_broken_manifest_is_a_contract_violation(world: World) -> None:
    _artifact_version(world)
    broken = [{"artifactId": "a1", "digest": "not-a-digest", "mediaType": "image/png", "size": 3}]
    world.provider.script(Act(200, envelope("SUCCEEDED", result={"artifacts": broken})))
    response = world.invoke({"chart": "overall"}, service="acme.pics")
    assert response.status_code == 502
    assert response.json()["code"] == "PROVIDER_CONTRACT_VIOLATION"
    assert world.balances() == (100, 0)


def test_session_calls_are_recorded_as_session_channel(world: World) -> None:
    person = make_account(world.runtime.db, "person@example.com", password=DEFAULT_PASSWORD)
    with world.runtime.db.transaction() as session:
        ledger.grant(session, account_id=person, amount=20, now=utcnow())
    tokens = login(world.client, "person@example.com")
    response = world.invoke({"n": 1}, api_key=tokens["accessToken"])
    assert response.status_code == 200, response.text
    receipt = world.get(
        f"/v1/invocations/{response.json()['invocationId']}", api_key=tokens["accessToken"]
    ).json()
    assert receipt["channel"] == "SESSION"
    assert world.balances(person) == (10, 0)
