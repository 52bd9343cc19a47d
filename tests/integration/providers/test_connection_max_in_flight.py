"""A connection's own `maxInFlight` (DESIGN §7, decision 0510): set by its owner through the
provider API, and by an operator with `update-connection --max-in-flight`; up to the ceiling;
not a new revision, so approval is kept; bad values are refused and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from builders.accounts import bearer, login, make_account
from builders.providers import CREDENTIAL, RunningProvider, reference_provider
from mercato.db.runtime import Runtime
from mercato.providers import service as providers

OWNER, OTHER = "provider@example.com", "other@example.com"


@dataclass
class Owner:
    client: TestClient
    runtime: Runtime
    headers: dict[str, dict[str, str]]
    connection_id: str

    def patch(self, body: Any, who: str = OWNER, raw: bytes | None = None) -> Any:
        path = f"/v1/provider/connections/{self.connection_id}"
        if raw is not None:
            headers = {**self.headers[who], "Content-Type": "application/json"}
            return self.client.patch(path, content=raw, headers=headers)
        return self.client.patch(path, json=body, headers=self.headers[who])

    def stored(self) -> tuple[Any, ...]:
        with self.runtime.db.read() as session:
            row = providers.get_connection(session, connection_id=self.connection_id)
            return (row.revision, row.approved_revision, row.max_in_flight, row.base_url)


@pytest.fixture
def owner(runtime: Runtime, client: TestClient) -> Iterator[Owner]:
    make_account(runtime.db, OWNER)
    make_account(runtime.db, OTHER)
    headers = {who: bearer(login(client, who)["accessToken"]) for who in (OWNER, OTHER)}
    provider: RunningProvider
    with reference_provider() as provider:
        body = {"name": "main", "baseUrl": provider.url, "credential": CREDENTIAL}
        made = client.post("/v1/provider/connections", json=body, headers=headers[OWNER])
        assert made.status_code == 201, made.text
        connection_id = str(made.json()["connectionId"])
        with runtime.db.transaction() as session:
            providers.approve_connection(
                session, connection_id=connection_id, now=runtime.clock.now()
            )
        yield Owner(client, runtime, headers, connection_id)


def test_the_owner_sets_and_clears_max_in_flight_and_approval_is_kept(owner: Owner) -> None:
    revision, approved, limit, _ = owner.stored()
    assert approved == revision and limit is None

    changed = owner.patch({"maxInFlight": 5})

    assert changed.status_code == 200, changed.text
    document = changed.json()
    assert document["maxInFlight"] == 5
    assert document["approved"] is True and document["revision"] == revision
    assert owner.stored()[:3] == (revision, revision, 5)
    ceiling = owner.runtime.settings.provider_max_in_flight_ceiling
    assert owner.patch({"maxInFlight": ceiling}).json()["maxInFlight"] == ceiling
    cleared = owner.patch({"maxInFlight": None})
    assert cleared.status_code == 200 and cleared.json()["maxInFlight"] is None
    assert owner.stored()[:3] == (revision, revision, None)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"maxInFlight": 1025}, 422, "INVALID_PROVIDER_CONNECTION"),  # over the ceiling
        ({"maxInFlight": 0}, 422, "INVALID_PROVIDER_CONNECTION"),
        ({"maxInFlight": -1}, 422, "INVALID_PROVIDER_CONNECTION"),
        ({"maxInFlight": 2**63}, 422, "INVALID_PROVIDER_CONNECTION"),
        ({"maxInFlight": "5"}, 400, "INVALID_REQUEST"),
        ({"maxInFlight": True}, 400, "INVALID_REQUEST"),
        ({"maxInFlight": 5.0}, 400, "INVALID_REQUEST"),
        ({"maxInFlight": [5]}, 400, "INVALID_REQUEST"),
        ({}, 400, "INVALID_REQUEST"),
        ({"maxInFlight": 5, "baseUrl": "http://127.0.0.1:1"}, 400, "INVALID_REQUEST"),
        ([5], 400, "INVALID_REQUEST"),
    ],
)
def test_a_bad_max_in_flight_is_refused_and_changes_nothing(
    owner: Owner, body: Any, status: int, code: str
) -> None:
    before = owner.stored()

    refused = owner.patch(body)

    assert refused.status_code == status, refused.text
    problem = refused.json()
    assert problem["code"] == code
    if status == 422:
        assert problem["field"] == "maxInFlight"
    assert owner.stored() == before


def test_a_body_that_is_not_json_or_too_deep_is_refused(owner: Owner) -> None:
    before = owner.stored()
    for raw in (b"{", b'{"maxInFlight": 1e309}', b"[" * 10_000 + b"]" * 10_000):
        refused = owner.patch(None, raw=raw)
        assert refused.status_code in (400, 413, 422), refused.text
        assert refused.json()["code"]
    assert owner.stored() == before


def test_another_provider_cannot_change_it(owner: Owner) -> None:
    before = owner.stored()

    refused = owner.patch({"maxInFlight": 3}, who=OTHER)

    assert refused.status_code == 404 and refused.json()["code"] == "PROVIDER_CONNECTION_NOT_FOUND"
    assert owner.stored() == before


def test_the_operator_sets_it_and_approval_is_kept(
    owner: Owner, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import os

    from mercato.cli.main import main

    settings = owner.runtime.settings
    for name in list(os.environ):
        if name.startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(settings.data_dir))
    revision = owner.stored()[0]

    code = main(["admin", "update-connection", owner.connection_id, "--max-in-flight", "7"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert owner.stored()[:3] == (revision, revision, 7)

    code = main(
        ["admin", "update-connection", owner.connection_id, "--max-in-flight", "9", "--json"]
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document == {
        "connectionId": owner.connection_id,
        "revision": revision,
        "approved": True,
        "maxInFlight": 9,
    }
    assert owner.stored()[:3] == (revision, revision, 9)

    try:
        code = main(["admin", "update-connection", owner.connection_id, "--max-in-flight", "1025"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    err = capsys.readouterr().err
    assert code == 2 and "--max-in-flight" in err and len(err.splitlines()) == 1
    assert owner.stored()[:3] == (revision, revision, 9)
