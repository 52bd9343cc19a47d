"""Catalog endpoints: shapes of DESIGN §6, exact versions, caching, compatibility paths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from builders.catalog import (
    DISPLAY_NAME,
    EXAMPLE_CONTRACT,
    SERVICE_CODE,
    example_contract,
    make_connection,
    make_provider,
    publish,
)
from mercato.core.canonical import digest_of
from mercato.db.runtime import Runtime

LISTING = f"/v1/catalog/listings/{SERVICE_CODE}"
V1 = f"{LISTING}/versions/v1"
V1_CONTRACT = f"{V1}/contract"
IMMUTABLE = "public, max-age=31536000, immutable"

OPEN_SCHEMA = {"type": "object", "additionalProperties": True}
CLOSED_CONFIG = {"type": "object", "properties": {}, "additionalProperties": False}


@pytest.fixture
def published(runtime: Runtime) -> dict[str, str]:
    owner_id, connection_id = make_provider(runtime)
    publish(runtime, connection_id, provider_share_bps=7300)
    return {"owner_id": owner_id, "connection_id": connection_id}


def test_contract_endpoint_returns_spec_members_of_the_example(
    client: TestClient, published: dict[str, str]
) -> None:
    response = client.get(V1_CONTRACT)
    assert response.status_code == 200
    body = response.json()
    assert list(body) == [
        "serviceCode", "version", "adapterRef", "adapterContractDigest",
        "installationConfigSchema", "installationConfigSchemaDigest", "presentationContractRef",
        "presentationContractDigest", "providerOutcomes", "requestMaxBytes", "requestSchema",
        "requestSchemaDigest", "requestShape", "responseMaxBytes", "resultSchema",
        "resultSchemaDigest", "contractDigest", "hasArtifactContract",
    ]  # fmt: skip
    assert body["serviceCode"] == SERVICE_CODE and body["version"] == "v1"
    assert body["adapterRef"] == "vetted.http-json/v1"
    assert body["installationConfigSchema"] == CLOSED_CONFIG
    # Spec 2.2: open objects (additionalProperties true); the request's own members are
    # bounded as the provider answers them (decision 0205).
    assert body["requestSchema"] == EXAMPLE_CONTRACT["requestSchema"]
    assert body["requestSchema"]["type"] == "object"
    assert body["requestSchema"]["additionalProperties"] is True
    assert body["resultSchema"] == OPEN_SCHEMA
    assert (body["requestMaxBytes"], body["responseMaxBytes"]) == (65536, 262144)
    assert body["providerOutcomes"] == [
        "SUCCEEDED", "DEFINED_FAILURE", "RETRYABLE_BEFORE_ACCEPT", "UNKNOWN_OUTCOME",
    ]  # fmt: skip
    assert body["presentationContractRef"] == "" and body["presentationContractDigest"] == ""
    assert body["hasArtifactContract"] is True
    # Every digest recomputed here from the published members.
    assert body["adapterContractDigest"] == digest_of({"adapterRef": "vetted.http-json/v1"})
    assert body["installationConfigSchemaDigest"] == digest_of(CLOSED_CONFIG)
    assert body["requestSchemaDigest"] == digest_of(EXAMPLE_CONTRACT["requestSchema"])
    assert body["resultSchemaDigest"] == digest_of(OPEN_SCHEMA)
    assert body["contractDigest"] == digest_of(
        {k: v for k, v in body.items() if k != "contractDigest"}
    )


def test_version_and_listing_shapes(client: TestClient, published: dict[str, str]) -> None:
    contract_digest = client.get(V1_CONTRACT).json()["contractDigest"]
    version = client.get(V1).json()
    published_at = version.pop("publishedAt")
    assert published_at.endswith("Z")
    assert version == {
        "serviceCode": SERVICE_CODE,
        "version": "v1",
        "displayName": DISPLAY_NAME,
        "price": 10,
        "contractDigest": contract_digest,
        "hasArtifactContract": True,
        "requestMaxBytes": 65536,
        "responseMaxBytes": 262144,
    }
    assert client.get(LISTING).json() == {
        "serviceCode": SERVICE_CODE,
        "displayName": DISPLAY_NAME,
        "versions": [{"version": "v1", "price": 10}],
        "description": "Daily chart snapshots.",
    }
    assert client.get("/v1/catalog/listings").json() == {
        "items": [
            {
                "serviceCode": SERVICE_CODE,
                "displayName": DISPLAY_NAME,
                "versions": [{"version": "v1", "price": 10}],
            }
        ],
        "nextCursor": None,
    }


def test_v2_beside_v1_and_v1_answers_byte_identically(
    runtime: Runtime, client: TestClient, published: dict[str, str]
) -> None:
    before = {path: client.get(path) for path in (V1, V1_CONTRACT)}
    publish(
        runtime,
        published["connection_id"],
        version="v2",
        price=15,
        display_name="pixiv daily ranking (new)",
        contract=example_contract(responseMaxBytes=524288, artifactContract=None),
    )
    for path, response in before.items():
        again = client.get(path)
        assert again.status_code == 200
        assert again.content == response.content
        assert again.headers["etag"] == response.headers["etag"]
    v2 = client.get(f"{LISTING}/versions/v2/contract").json()
    assert (v2["responseMaxBytes"], v2["hasArtifactContract"]) == (524288, False)
    assert client.get(LISTING).json()["versions"] == [
        {"version": "v1", "price": 10},
        {"version": "v2", "price": 15},
    ]


@pytest.mark.parametrize("label", ["latest", "v2", "v01", "V1", "1", "stable"])
def test_no_alias_and_no_missing_version(
    client: TestClient, published: dict[str, str], label: str
) -> None:
    for suffix in ("", "/contract"):
        response = client.get(f"{LISTING}/versions/{label}{suffix}")
        assert response.status_code == 404
        assert response.json()["code"] == "VERSION_NOT_FOUND"


def test_unknown_listing_is_not_found(client: TestClient, published: dict[str, str]) -> None:
    unknown = "/v1/catalog/listings/nobody.here"
    for path in (unknown, f"{unknown}/versions/v1", f"{unknown}/versions/v1/contract"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["code"] == "LISTING_NOT_FOUND"


@pytest.mark.parametrize("path", [V1, V1_CONTRACT])
def test_immutable_documents_carry_strong_etag_and_answer_304(
    client: TestClient, published: dict[str, str], path: str
) -> None:
    first = client.get(path)
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert first.headers["cache-control"] == IMMUTABLE
    if path == V1_CONTRACT:
        assert etag == f'"{first.json()["contractDigest"]}"'
    else:
        assert etag == f'"{digest_of(first.json())}"'
    cached = client.get(path, headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b""
    assert cached.headers["etag"] == etag
    listed = client.get(path, headers={"If-None-Match": f'"other", {etag}'})
    assert listed.status_code == 304
    stale = client.get(path, headers={"If-None-Match": '"something-else"'})
    assert stale.status_code == 200 and stale.content == first.content


def test_listing_documents_are_not_marked_immutable(
    client: TestClient, published: dict[str, str]
) -> None:
    for path in ("/v1/catalog/listings", LISTING):
        assert "immutable" not in client.get(path).headers.get("cache-control", "")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/v1/catalog/services", "/v1/catalog/listings"),
        (f"/v1/catalog/services/{SERVICE_CODE}", LISTING),
        (f"/v1/catalog/services/{SERVICE_CODE}/versions/v1", V1),
        (f"/v1/catalog/services/{SERVICE_CODE}/versions/v1/contract", V1_CONTRACT),
    ],
)
def test_compatibility_paths_mirror_with_deprecation(
    client: TestClient, published: dict[str, str], old: str, new: str
) -> None:
    old_response, new_response = client.get(old), client.get(new)
    assert old_response.status_code == new_response.status_code == 200
    assert old_response.content == new_response.content
    assert old_response.headers["deprecation"] == "true"
    assert old_response.headers["link"] == f'<{new}>; rel="successor-version"'
    assert "deprecation" not in new_response.headers
    if "etag" in new_response.headers:
        assert old_response.headers["etag"] == new_response.headers["etag"]
        cached = client.get(old, headers={"If-None-Match": new_response.headers["etag"]})
        assert cached.status_code == 304 and cached.headers["deprecation"] == "true"


def test_compatibility_paths_keep_headers_on_not_found(
    client: TestClient, published: dict[str, str]
) -> None:
    response = client.get(f"/v1/catalog/services/{SERVICE_CODE}/versions/latest")
    assert response.status_code == 404
    assert response.json()["code"] == "VERSION_NOT_FOUND"
    assert response.headers["deprecation"] == "true"
    assert response.headers["link"] == f'<{LISTING}/versions/latest>; rel="successor-version"'


def test_pagination_walks_every_public_listing_once(runtime: Runtime, client: TestClient) -> None:
    _, connection_id = make_provider(runtime)
    codes = [f"acme.service-{i:02d}" for i in range(7)]
    for code in reversed(codes):
        publish(runtime, connection_id, service_code=code)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/catalog/listings", params=params).json()
        pages += 1
        assert len(page["items"]) <= 3
        seen += [item["serviceCode"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == codes and pages == 3
    compat = client.get("/v1/catalog/services", params={"limit": 3}).json()
    current = client.get("/v1/catalog/listings", params={"limit": 3}).json()
    assert compat == current


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"cursor": "!!!"}, "INVALID_CURSOR"),
        ({"cursor": "Lw"}, "INVALID_CURSOR"),
        ({"limit": 0}, "INVALID_REQUEST"),
        ({"limit": 101}, "INVALID_REQUEST"),
    ],
)
def test_bad_page_parameters(
    client: TestClient, published: dict[str, str], params: dict[str, Any], code: str
) -> None:
    response = client.get("/v1/catalog/listings", params=params)
    assert response.status_code == 400 and response.json()["code"] == code


def test_only_public_listings_appear(runtime: Runtime, client: TestClient) -> None:
    owner_id, connection_id = make_provider(runtime)
    unapproved = make_connection(runtime, owner_id, name="pending", approved=False)
    publish(runtime, connection_id, service_code="acme.public")
    with pytest.raises(Exception):  # noqa: B017 - any refusal: it must not publish
        publish(runtime, unapproved, service_code="acme.draft-only")
    assert [i["serviceCode"] for i in client.get("/v1/catalog/listings").json()["items"]] == [
        "acme.public"
    ]
    assert client.get("/v1/catalog/listings/acme.draft-only").status_code == 404


def test_no_share_owner_or_connection_in_any_catalog_response(
    runtime: Runtime, client: TestClient, published: dict[str, str]
) -> None:
    with runtime.db.read() as session:
        from mercato.catalog.models import Listing

        listing = session.query(Listing).one()
        listing_id = listing.id
    secrets = [
        published["owner_id"],
        published["connection_id"],
        listing_id,
        "7300",
        "provider@example.com",
        "127.0.0.1",
        "Share",
        "share",
        "owner",
        "connection",
    ]
    paths = [
        "/v1/catalog/listings",
        LISTING,
        V1,
        V1_CONTRACT,
        "/v1/catalog/services",
        f"/v1/catalog/services/{SERVICE_CODE}/versions/v1/contract",
    ]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200
        text = response.text + json.dumps(dict(response.headers))
        for secret in secrets:
            assert secret not in text, (path, secret)
