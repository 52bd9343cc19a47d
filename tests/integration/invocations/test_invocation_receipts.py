"""Receipts: newest first with a keyset cursor, status filter, owner only."""

from __future__ import annotations

from builders.accounts import make_account, make_api_key
from builders.invocation_world import World
from builders.invocations import defined, unknown


def test_list_is_newest_first_with_cursor_and_filter(world: World) -> None:
    world.provider.script(defined(400, "NOPE"))
    ids = [world.invoke({"n": i}, key=f"k{i}").json()["invocationId"] for i in range(5)]
    world.provider.script(unknown())
    pending = world.invoke({"n": 99}, key="pending").json()["invocationId"]
    newest_first = [pending, *reversed(ids)]

    seen: list[str] = []
    cursor = None
    while True:
        query = "/v1/invocations?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = world.get(query).json()
        assert set(page) == {"items", "nextCursor"}
        seen += [item["invocationId"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == newest_first

    failed = world.get("/v1/invocations?status=FAILED").json()["items"]
    assert [i["invocationId"] for i in failed] == [ids[0]]
    assert failed[0]["errorCode"] == "NOPE" and failed[0]["actualSpend"] == 0
    pending_items = world.get("/v1/invocations?status=PENDING").json()["items"]
    assert [(i["invocationId"], i["actualSpend"]) for i in pending_items] == [(pending, None)]
    assert len(world.get("/v1/invocations?status=SUCCEEDED").json()["items"]) == 4


def test_bad_query_parameters_are_400(world: World) -> None:
    for query in ("limit=0", "limit=101", "status=DONE", "cursor=%%%", "cursor=YWJj"):
        response = world.get(f"/v1/invocations?{query}")
        assert response.status_code == 400, query


def test_receipts_are_private(world: World) -> None:
    invocation_id = world.invoke({"n": 1}).json()["invocationId"]
    other = make_account(world.runtime.db, "nosy@example.com", password=None)
    other_key, _ = make_api_key(world.runtime.db, other)
    assert world.get(f"/v1/invocations/{invocation_id}", api_key=other_key).status_code == 404
    assert world.get("/v1/invocations/inv_doesnotexist").status_code == 404
    assert world.get("/v1/invocations", api_key=other_key).json() == {
        "items": [],
        "nextCursor": None,
    }
    receipt = world.get(f"/v1/invocations/{invocation_id}").text
    for secret in (
        world.provider.url,
        "scripted-credential",
        world.provider_id,
        world.caller_id,
        "7000",
        "mercato:",
    ):
        assert secret not in receipt
