"""`GET /v1/catalog/listings?q=`: filtered in the database, the same on both stores."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from builders.catalog import make_provider, publish
from mercato.db.runtime import Runtime

LISTINGS = "/v1/catalog/listings"


@pytest.fixture
def catalog(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    for code, name, description in [
        ("acme.weather", "Weather Now", "Forecasts by city."),
        ("acme.ranking", "Daily chart", "The top 100% of artworks."),
        ("acme.rank-up", "Rank_up", "Climb fast with back\\slash."),
        ("zeta.tools", "Toolbox", "Résumé parsing, ÉCOLE edition."),
    ]:
        publish(
            runtime, connection_id, service_code=code, display_name=name, description=description
        )


def _codes(client: TestClient, q: str, **params: Any) -> list[str]:
    response = client.get(LISTINGS, params={"q": q, **params})
    assert response.status_code == 200, response.text
    return [item["serviceCode"] for item in response.json()["items"]]


def test_each_field_matches_case_insensitively(client: TestClient, catalog: None) -> None:
    assert _codes(client, "WEATHER") == ["acme.weather"]  # service code
    assert _codes(client, "daily CHART") == ["acme.ranking"]  # display name, every word
    assert _codes(client, "forecasts") == ["acme.weather"]  # description
    assert _codes(client, "rank") == ["acme.rank-up", "acme.ranking"]
    assert _codes(client, "rank weather") == []


def test_only_ascii_letters_fold_so_both_stores_agree(client: TestClient, catalog: None) -> None:
    assert _codes(client, "RÉSUMÉ") == []
    assert _codes(client, "Résumé") == ["zeta.tools"]
    assert _codes(client, "école") == []
    assert _codes(client, "École") == ["zeta.tools"]


def test_wildcards_are_literal(client: TestClient, catalog: None) -> None:
    assert _codes(client, "%") == ["acme.ranking"]
    assert _codes(client, "100%") == ["acme.ranking"]
    assert _codes(client, "_") == ["acme.rank-up"]
    assert _codes(client, "k_u") == ["acme.rank-up"]
    assert _codes(client, "\\") == ["acme.rank-up"]
    assert _codes(client, "/") == []
    assert _codes(client, "w%r") == []


def test_empty_q_is_no_filter(client: TestClient, catalog: None) -> None:
    every = ["acme.rank-up", "acme.ranking", "acme.weather", "zeta.tools"]
    assert _codes(client, "") == every
    assert _codes(client, "   ") == every
    assert client.get(LISTINGS).json() == client.get(LISTINGS, params={"q": ""}).json()


def test_paging_with_q_walks_only_the_matches(runtime: Runtime, client: TestClient) -> None:
    _, connection_id = make_provider(runtime)
    for i in range(7):
        publish(runtime, connection_id, service_code=f"acme.map-{i}", display_name="Maps")
        publish(runtime, connection_id, service_code=f"acme.other-{i}", display_name="Other")
    seen: list[str] = []
    params: dict[str, Any] = {"q": "maps", "limit": 3}
    while True:
        page = client.get(LISTINGS, params=params).json()
        seen += [item["serviceCode"] for item in page["items"]]
        if page["nextCursor"] is None:
            break
        params["cursor"] = page["nextCursor"]
    assert seen == [f"acme.map-{i}" for i in range(7)]


def test_a_cursor_is_valid_only_for_its_own_q(runtime: Runtime, client: TestClient) -> None:
    _, connection_id = make_provider(runtime)
    for i in range(3):
        publish(runtime, connection_id, service_code=f"acme.map-{i}", display_name="Maps")
    searched = client.get(LISTINGS, params={"q": "maps", "limit": 1}).json()["nextCursor"]
    plain = client.get(LISTINGS, params={"limit": 1}).json()["nextCursor"]
    assert client.get(LISTINGS, params={"q": " MAPS ", "cursor": searched}).status_code == 200
    for params in [
        {"cursor": searched},
        {"q": "map", "cursor": searched},
        {"q": "m", "cursor": plain},
    ]:
        response = client.get(LISTINGS, params=params)
        assert response.status_code == 400 and response.json()["code"] == "INVALID_CURSOR"


@pytest.mark.parametrize("path", [LISTINGS, "/v1/catalog/services"])
def test_q_over_200_characters_is_a_problem(client: TestClient, catalog: None, path: str) -> None:
    assert client.get(path, params={"q": "a" * 200}).status_code == 200
    response = client.get(path, params={"q": "a" * 201})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "INVALID_SEARCH"


def test_compatibility_path_searches_the_same(client: TestClient, catalog: None) -> None:
    current = client.get(LISTINGS, params={"q": "rank", "limit": 1}).json()
    compat = client.get("/v1/catalog/services", params={"q": "rank", "limit": 1}).json()
    assert compat == current and current["nextCursor"] is not None
