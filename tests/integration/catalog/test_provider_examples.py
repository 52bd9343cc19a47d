"""A version's examples and a listing's publisher name through the provider API, on both stores:
an example is the provider's own request and result, judged against the version's schemas and
byte limits when it is set; a bad one is refused with its JSON pointer and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from builders.accounts import bearer, login, make_account
from builders.catalog import example_contract
from builders.providers import CREDENTIAL, reference_provider
from mercato.catalog.models import Listing, Version
from mercato.db.runtime import Runtime

PROVIDER, OTHER = "provider@example.com", "other@example.com"
CONTRACT = example_contract(
    artifactContract=None,
    requestMaxBytes=64,
    requestSchema={"type": "object", "properties": {"n": {"type": "integer"}}},
    resultSchema={
        "type": "object",
        "required": ["echo"],
        "properties": {"echo": {"type": "object"}},
    },
)
GOOD = [{"request": {"n": 2}, "result": {"echo": {"n": 2}}}]


class Api:
    def __init__(self, client: TestClient, runtime: Runtime, url: str) -> None:
        self.client, self.runtime, self.url = client, runtime, url
        self.headers = {who: bearer(login(client, who)["accessToken"]) for who in (PROVIDER, OTHER)}

    def call(self, method: str, path: str, body: Any = None, who: str = PROVIDER) -> Any:
        return self.client.request(method, path, json=body, headers=self.headers[who])

    def listing_and_connection(self) -> str:
        body = {"name": "main", "baseUrl": self.url, "credential": CREDENTIAL}
        made = self.call("POST", "/v1/provider/connections", body)
        assert made.status_code == 201, made.text
        listing = {"serviceCode": "acme.tool", "displayName": "Tool", "publisherName": " Acme "}
        created = self.call("POST", "/v1/provider/listings", listing)
        assert created.status_code == 201 and created.json()["publisherName"] == "Acme"
        return str(made.json()["connectionId"])

    def versions(self) -> int:
        with self.runtime.db.read() as session:
            return int(session.scalar(select(func.count()).select_from(Version)) or 0)


@pytest.fixture
def api(runtime: Runtime, client: TestClient) -> Iterator[Api]:
    make_account(runtime.db, PROVIDER)
    make_account(runtime.db, OTHER)
    with reference_provider() as provider:
        yield Api(client, runtime, provider.url)


def _draft(api: Api, connection_id: str, examples: Any) -> Any:
    body = {"version": "v1", "connectionId": connection_id, "price": 5, "contract": CONTRACT}
    if examples is not None:
        body["examples"] = examples
    return api.call("POST", "/v1/provider/listings/acme.tool/versions", body)


def test_a_version_keeps_the_example_that_matches_its_contract(api: Api) -> None:
    made = _draft(api, api.listing_and_connection(), GOOD)
    assert made.status_code == 201, made.text
    assert made.json()["examples"] == GOOD
    again = api.call("GET", f"/v1/provider/versions/{made.json()['versionId']}")
    assert again.json()["examples"] == GOOD


@pytest.mark.parametrize(
    ("examples", "pointer"),
    [
        ([{"request": {"n": 2}, "result": {"other": 1}}], "/examples/0/result"),  # required
        ([{"request": {"n": "two"}, "result": {"echo": {}}}], "/examples/0/request/n"),
        ([{"request": {"n": 1, "pad": "x" * 80}, "result": {"echo": {}}}], "/examples/0/request"),
        ([{"request": {"n": 1}, "result": {"echo": {}}, "caller": "me"}], "/examples/0"),
        ([{"request": {}, "result": {"echo": {}}}], "/examples/0/request"),
        ([{"request": [1], "result": {"echo": {}}}], "/examples/0/request"),
    ],
)
def test_an_example_the_contract_refuses_is_refused_with_its_pointer_and_nothing_is_made(
    api: Api, examples: Any, pointer: str
) -> None:
    connection_id = api.listing_and_connection()
    refused = _draft(api, connection_id, examples)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["code"] == "INVALID_EXAMPLE"
    assert problem["errors"][0]["pointer"] == pointer
    assert api.versions() == 0


def test_more_than_three_examples_are_refused(api: Api) -> None:
    refused = _draft(api, api.listing_and_connection(), GOOD * 4)
    assert refused.status_code in (400, 422) and api.versions() == 0


def test_a_contract_change_the_kept_example_no_longer_fits_is_refused(api: Api) -> None:
    made = _draft(api, api.listing_and_connection(), GOOD)
    version_id = made.json()["versionId"]
    stricter = {**CONTRACT, "resultSchema": {"type": "object", "required": ["echo", "at"]}}
    refused = api.call("PUT", f"/v1/provider/versions/{version_id}", {"contract": stricter})
    assert refused.status_code == 422 and refused.json()["code"] == "INVALID_EXAMPLE"
    kept = api.call("GET", f"/v1/provider/versions/{version_id}").json()
    assert kept["contractDigest"] == made.json()["contractDigest"] and kept["examples"] == GOOD
    bad = [{"request": {"n": 1}, "result": {}}]
    assert (
        api.call("PUT", f"/v1/provider/versions/{version_id}", {"examples": bad}).status_code == 422
    )
    assert api.call("GET", f"/v1/provider/versions/{version_id}").json()["examples"] == GOOD


def test_the_provider_names_and_renames_its_publisher_and_no_one_else_can(api: Api) -> None:
    api.listing_and_connection()
    path = "/v1/provider/listings/acme.tool"
    renamed = api.call("PUT", path, {"publisherName": "Acme Tools Ltd"})
    assert renamed.status_code == 200 and renamed.json()["publisherName"] == "Acme Tools Ltd"
    too_long = api.call("PUT", path, {"publisherName": "x" * 101})
    assert too_long.status_code == 400 and too_long.json()["code"]
    assert api.call("PUT", path, {"publisherName": "ok", "extra": 1}).status_code == 400
    assert api.call("PUT", path, {"publisherName": "Not me"}, who=OTHER).status_code == 404
    with api.runtime.db.read() as session:
        assert session.scalar(select(Listing.publisher_name)) == "Acme Tools Ltd"
    cleared = api.call("PUT", path, {"publisherName": "  "})
    assert cleared.status_code == 200 and cleared.json()["publisherName"] is None
