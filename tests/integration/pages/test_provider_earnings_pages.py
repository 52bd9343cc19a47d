"""Earnings shown as paid: a 2-point price at the default 8000 bps pays 1 point per settled call,
and the page, the provider API and the ledger's settlements agree (both stores)."""

from __future__ import annotations

import re

from sqlalchemy import select

from builders.accounts import DEFAULT_PASSWORD, bearer, login
from builders.catalog import publish
from builders.invocation_world import CONTRACT, World
from builders.invocations import ScriptedProvider, ok
from builders.pages import PERSON, Browser
from mercato.accounts import service as accounts
from mercato.ledger.models import Reservation
from mercato.ledger.split import provider_leg
from mercato.providers.models import ProviderConnection

PROVIDER = "provider@example.com"


def test_the_points_shown_per_call_are_the_points_settled(
    world: World, provider: ScriptedProvider, people: dict[str, str]
) -> None:
    with world.runtime.db.transaction() as session:
        accounts.set_password_hash(
            session,
            account_id=world.provider_id,
            password_hash=accounts.hash_password(DEFAULT_PASSWORD),
        )
        connection_id = session.scalars(select(ProviderConnection.id)).one()
    cheap = publish(
        world.runtime, connection_id, service_code="acme.cheap", price=2, contract=CONTRACT
    )
    version_id = cheap.version.id
    provider.script(ok({"echo": 1}), ok({"echo": 2}), ok({"echo": 3}))
    for key in ("a", "b", "c"):
        assert world.invoke({"n": 1}, key=key, service="acme.cheap").status_code == 200
    with world.runtime.db.read() as session:
        settled = session.scalars(
            select(Reservation.provider_amount).where(Reservation.state == "SETTLED")
        ).all()
    assert settled == [1, 1, 1] == [provider_leg(2, 8000)] * 3

    token = login(world.client, PROVIDER)["accessToken"]
    document = world.client.get(f"/v1/provider/versions/{version_id}", headers=bearer(token))
    assert document.json()["earnings"] == {
        "pointsPerCall": 1,
        "providerShareBps": 8000,
        "earnedPoints": 3,
    }

    browser = Browser(world)
    browser.login(PROVIDER)
    page = browser.get(f"/provider/versions/{version_id}").text
    shown = re.search(r'id="points-per-call"><strong>(\d+)</strong>', page)
    assert shown and shown.group(1) == "1"
    rows = re.findall(r'<tr class="earning-row">.*?<td class="amount">(\d+)</td>', page, re.S)
    assert rows == ["1", "1", "1"]
    other_version = world.client.get(
        f"/v1/provider/versions/{version_id}",
        headers=bearer(login(world.client, PERSON)["accessToken"]),
    )
    assert other_version.status_code == 404  # another account is not this version's provider
