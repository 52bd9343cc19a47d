"""A populated platform for the security tests (Schemathesis pass, access matrix).

Two callers (`owner` holds every object; `other` is the stranger), a staff member and a provider,
each with an API key and a session; a published version bound to a scripted provider on
127.0.0.1, one settled session call and one API-key call by the owner, the owner's dispute, a
draft version, a hold. Everything is made through the services, as the platform would.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from builders.accounts import make_account, make_api_key
from builders.invocation_world import SERVICE, World, build_world
from builders.invocations import ScriptedProvider
from mercato.accounts import service as accounts
from mercato.catalog import service as catalog
from mercato.ledger import service as ledger
from mercato.web.pages.common import ACCESS_COOKIE, CSRF_COOKIE, REFRESH_COOKIE

_KEYS = itertools.count(1)


@dataclass(frozen=True)
class Party:
    account_id: str
    api_key: str
    key_id: str
    access_token: str
    refresh_token: str

    def key_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def session_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


@dataclass
class SecurityWorld:
    world: World
    owner: Party
    other: Party
    staff: Party
    provider: Party
    session_call: str
    key_call: str
    case_id: str
    connection_id: str
    listing_id: str
    draft_version_id: str
    hold_id: str
    spare_key_id: str = ""

    @property
    def client(self) -> TestClient:
        return self.world.client

    def browser(self, party: Party | None) -> TestClient:
        """A cookie client signed in as `party` (None: signed out) with a valid CSRF pair."""
        http = TestClient(self.client.app, raise_server_exceptions=False)
        if party is not None:
            http.cookies.set(ACCESS_COOKIE, party.access_token)
            http.cookies.set(REFRESH_COOKIE, party.refresh_token)
        page = http.get("/login", follow_redirects=False)
        assert http.cookies.get(CSRF_COOKIE), page.status_code
        return http

    def csrf(self, http: TestClient) -> str:
        import re

        page = http.get("/login", follow_redirects=False)
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found, page.text[:300]
        return found.group(1)

    def invoke(self, party: Party, *, session: bool, body: Any = None) -> httpx.Response:
        headers = party.session_headers() if session else party.key_headers()
        headers["Idempotency-Key"] = f"security-{next(_KEYS)}"
        return self.client.post(
            f"/v1/services/{SERVICE}/versions/v1:invoke",
            json=body if body is not None else {"n": 1},
            headers=headers,
        )


def _party(world: World, account_id: str) -> Party:
    runtime = world.runtime
    api_key, key_id = make_api_key(runtime.db, account_id)
    with runtime.db.transaction() as session:
        tokens = accounts.start_session(
            session, account_id=account_id, settings=runtime.settings, now=runtime.clock.now()
        )
    return Party(account_id, api_key, key_id, tokens.access_token, tokens.refresh_token)


def build_security_world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> SecurityWorld:
    world = build_world(db_url, tmp_path, provider, default_quota_limit=100_000)
    runtime = world.runtime
    other_id = make_account(runtime.db, "other@example.com", password=None)
    staff_id = make_account(runtime.db, "staff@example.com", password=None, is_staff=True)
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=world.caller_id, amount=100_000, now=runtime.clock.now())
        ledger.grant(session, account_id=other_id, amount=100_000, now=runtime.clock.now())
    owner = _party(world, world.caller_id)
    security = SecurityWorld(
        world=world,
        owner=owner,
        other=_party(world, other_id),
        staff=_party(world, staff_id),
        provider=_party(world, world.provider_id),
        session_call="",
        key_call="",
        case_id="",
        connection_id="",
        listing_id="",
        draft_version_id="",
        hold_id="",
    )
    session_call = security.invoke(owner, session=True)
    assert session_call.status_code == 200, session_call.text
    key_call = security.invoke(owner, session=False)
    assert key_call.status_code == 200, key_call.text
    security.session_call = session_call.json()["invocationId"]
    security.key_call = key_call.json()["invocationId"]
    dispute = world.client.post(
        "/v1/disputes",
        json={"invocationId": security.session_call, "reason": "not what I asked for"},
        headers={**owner.session_headers(), "Idempotency-Key": "security-dispute"},
    )
    assert dispute.status_code == 201, dispute.text
    security.case_id = dispute.json()["caseId"]
    with runtime.db.read() as session:
        version = catalog.get_invocable_version(session, service_code=SERVICE, version="v1")
    security.connection_id = version.connection_id
    security.listing_id = version.listing_id
    security.draft_version_id = _draft(security)
    security.hold_id = _released_hold(security)
    security.spare_key_id = make_api_key(runtime.db, owner.account_id, name="spare")[1]
    return security


def _draft(security: SecurityWorld) -> str:
    """A draft v2 of the provider's listing, made through the provider console's service."""
    runtime = security.world.runtime
    from builders.catalog import example_contract, facts

    connection = facts(runtime, security.connection_id)
    with runtime.db.transaction() as session:
        draft = catalog.create_draft(
            session,
            listing_id=security.listing_id,
            version="v2",
            connection=connection,
            price=10,
            contract=example_contract(artifactContract=None),
            now=runtime.clock.now(),
        )
        return draft.id


def _released_hold(security: SecurityWorld) -> str:
    runtime = security.world.runtime
    with runtime.db.transaction() as session:
        hold_id = catalog.place_hold(
            session,
            service_code=SERVICE,
            kind="staff",
            reason="security test",
            created_by=security.staff.account_id,
            now=runtime.clock.now(),
        )
        catalog.release_hold(
            session, hold_id=hold_id, released_by=security.staff.account_id, now=runtime.clock.now()
        )
    return hold_id
