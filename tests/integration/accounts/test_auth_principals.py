"""The principal dependencies other domains use: current, session-only and staff-only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from builders.accounts import bearer, login, make_account, make_api_key
from mercato.accounts.schemas import Principal
from mercato.db.runtime import Runtime
from mercato.db.uow import Database
from mercato.web.app import create_app
from mercato.web.deps import current_principal, session_principal, staff_principal


@pytest.fixture
def probe(runtime: Runtime) -> Iterator[TestClient]:
    """The real app plus three probe routes, one per dependency."""
    app = create_app(runtime)

    def describe(principal: Principal) -> dict[str, object]:
        return {"accountId": principal.account_id, "channel": principal.channel}

    @app.get("/v1/probe/any")
    def any_(p: Annotated[Principal, Depends(current_principal)]) -> dict[str, object]:
        return describe(p)

    @app.get("/v1/probe/session")
    def session(p: Annotated[Principal, Depends(session_principal)]) -> dict[str, object]:
        return describe(p)

    @app.get("/v1/probe/staff")
    def staff(p: Annotated[Principal, Depends(staff_principal)]) -> dict[str, object]:
        return describe(p)

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_each_dependency_admits_the_right_callers(probe: TestClient, db: Database) -> None:
    caller = make_account(db, "caller@example.com")
    make_account(db, "staff@example.com", is_staff=True)
    key, _ = make_api_key(db, caller)
    caller_session = login(probe, "caller@example.com")["accessToken"]
    staff_session = login(probe, "staff@example.com")["accessToken"]

    expected = {
        # path: (api key, caller session, staff session)
        "/v1/probe/any": (200, 200, 200),
        "/v1/probe/session": (403, 200, 200),
        "/v1/probe/staff": (403, 403, 200),
    }
    for path, statuses in expected.items():
        got = tuple(
            probe.get(path, headers=bearer(token)).status_code
            for token in (key, caller_session, staff_session)
        )
        assert got == statuses, path
        assert probe.get(path).status_code == 401

    assert probe.get("/v1/probe/any", headers=bearer(key)).json() == {
        "accountId": caller,
        "channel": "API_KEY",
    }
    codes = {
        probe.get("/v1/probe/session", headers=bearer(key)).json()["code"],
        probe.get("/v1/probe/staff", headers=bearer(caller_session)).json()["code"],
    }
    assert codes == {"SESSION_REQUIRED", "STAFF_REQUIRED"}


def test_a_staff_api_key_is_still_not_a_staff_session(probe: TestClient, db: Database) -> None:
    staff = make_account(db, "staff@example.com", is_staff=True)
    key, _ = make_api_key(db, staff)
    response = probe.get("/v1/probe/staff", headers=bearer(key))
    assert response.status_code == 403
    assert response.json()["code"] == "SESSION_REQUIRED"
