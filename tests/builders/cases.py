"""A world for case tests: the invocation world plus session callers, staff and helpers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from httpx import Response

from builders.accounts import bearer, login, make_account
from builders.invocation_world import SERVICE, World
from mercato.ledger import service as ledger

PERSON = "person@example.com"
OTHER = "other@example.com"
STAFF = "staff@example.com"


@dataclass
class CaseWorld:
    """`world` (API-key caller, provider, published acme.echo v1) plus people with sessions."""

    world: World
    person_id: str
    person_token: str
    other_token: str
    staff_token: str

    @property
    def client(self) -> Any:
        return self.world.client

    def relogin(self) -> None:
        """Fresh access tokens (after the fake clock moved past their lifetime)."""
        self.person_token = login(self.client, PERSON)["accessToken"]
        self.other_token = login(self.client, OTHER)["accessToken"]
        self.staff_token = login(self.client, STAFF)["accessToken"]

    def session_call(self, token: str | None = None, *, key: str | None = None) -> str:
        """Invoke acme.echo v1 through a session; return the invocation id."""
        response = self.world.client.post(
            f"/v1/services/{SERVICE}/versions/v1:invoke",
            json={"n": 1},
            headers={
                **bearer(token or self.person_token),
                "Idempotency-Key": key or f"call-{uuid.uuid4().hex}",
            },
        )
        assert response.status_code in (200, 202, 422), response.text
        invocation_id: str = response.json()["invocationId"]
        return invocation_id

    def dispute(
        self,
        invocation_id: str,
        *,
        key: str | None = "dispute-1",
        reason: str = "The result was empty.",
        token: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Response:
        headers = bearer(token or self.person_token)
        if key is not None:
            headers["Idempotency-Key"] = key
        body = {"invocationId": invocation_id, "reason": reason, **(extra or {})}
        return self.client.post("/v1/disputes", json=body, headers=headers)

    def report(
        self,
        *,
        key: str | None = "report-1",
        service: str = SERVICE,
        version: str = "v1",
        category: str = "MISLEADING",
        text: str = "It does not echo.",
        token: str | None = None,
    ) -> Response:
        headers = bearer(token or self.person_token)
        if key is not None:
            headers["Idempotency-Key"] = key
        body = {"serviceCode": service, "version": version, "category": category, "text": text}
        return self.client.post("/v1/content-reports", json=body, headers=headers)

    def decide(self, case_id: str, decision: str, reason: str = "Checked the logs.") -> Response:
        return self.client.post(
            f"/v1/cases/{case_id}:decide",
            json={"decision": decision, "reason": reason},
            headers=bearer(self.staff_token),
        )

    def receipt(self, invocation_id: str, token: str | None = None) -> dict[str, Any]:
        response = self.client.get(
            f"/v1/invocations/{invocation_id}", headers=bearer(token or self.person_token)
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def case(self, case_id: str, token: str | None = None) -> Response:
        return self.client.get(f"/v1/cases/{case_id}", headers=bearer(token or self.person_token))

    def person_available(self) -> int:
        with self.world.runtime.db.read() as session:
            return ledger.balances(session, account_id=self.person_id).available


def add_people(world: World, *, points: int = 100) -> CaseWorld:
    """Create a person (with points), another person and a staff member; log them in."""
    db = world.runtime.db
    person_id = make_account(db, PERSON)
    other_id = make_account(db, OTHER)
    make_account(db, STAFF, is_staff=True)
    with db.transaction() as session:
        for account_id in (person_id, other_id):
            ledger.grant(session, account_id=account_id, amount=points, now=world.clock.now())
    cw = CaseWorld(world, person_id, "", "", "")
    cw.relogin()
    return cw
