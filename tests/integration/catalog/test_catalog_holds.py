"""Holds: a set per listing; the listing returns only when its last active hold is released."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from builders.catalog import SERVICE_CODE, hold, make_provider, publish, release
from mercato.catalog import service as catalog
from mercato.catalog.errors import (
    HoldAlreadyReleased,
    HoldNotFound,
    ListingNotFound,
    ListingUnavailable,
)
from mercato.catalog.models import Hold
from mercato.core.errors import ValidationFailed
from mercato.db.runtime import Runtime


def _listed(client: TestClient) -> list[str]:
    return [item["serviceCode"] for item in client.get("/v1/catalog/listings").json()["items"]]


def _invocable(runtime: Runtime) -> bool:
    with runtime.db.read() as session:
        try:
            catalog.get_invocable_version(session, service_code=SERVICE_CODE, version="v1")
        except ListingUnavailable:
            return False
    return True


def test_two_holds_releasing_one_keeps_it_out_releasing_both_brings_it_back(
    runtime: Runtime, client: TestClient
) -> None:
    _, connection_id = make_provider(runtime)
    listing_id = publish(runtime, connection_id).listing.id
    assert _listed(client) == [SERVICE_CODE] and _invocable(runtime)

    first, second = hold(runtime, reason="staff review"), hold(runtime, reason="report upheld")
    assert _listed(client) == [] and not _invocable(runtime)
    assert client.get(f"/v1/catalog/listings/{SERVICE_CODE}").status_code == 404

    release(runtime, first)
    assert _listed(client) == []
    assert not _invocable(runtime)
    with runtime.db.read() as session:
        assert not catalog.is_public(session, listing_id=listing_id)
        with pytest.raises(ListingUnavailable) as caught:
            catalog.get_invocable_version(session, service_code=SERVICE_CODE, version="v1")
    assert (caught.value.status, caught.value.code) == (403, "LISTING_UNAVAILABLE")

    release(runtime, second)
    assert _listed(client) == [SERVICE_CODE] and _invocable(runtime)
    assert client.get(f"/v1/catalog/listings/{SERVICE_CODE}/versions/v1").status_code == 200


def test_holds_are_kept_after_release(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    listing_id = publish(runtime, connection_id).listing.id
    hold_id = hold(runtime, reason="check the thumbnails")
    release(runtime, hold_id)
    with runtime.db.read() as session:
        row = session.get(Hold, hold_id)
        assert row is not None
        assert (row.kind, row.reason, row.created_by) == (
            "staff",
            "check the thumbnails",
            "staff:test",
        )
        assert row.released_at is not None and row.released_by == "staff:test"
        assert catalog.active_holds(session, listing_id=listing_id) == []


def test_releasing_a_released_hold_is_a_clear_conflict(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    hold_id = hold(runtime)
    release(runtime, hold_id)
    with pytest.raises(HoldAlreadyReleased) as caught:
        release(runtime, hold_id)
    assert (caught.value.status, caught.value.code) == (409, "HOLD_ALREADY_RELEASED")
    with pytest.raises(HoldNotFound):
        release(runtime, "hold_missing")


def test_hold_on_unknown_listing_or_without_reason(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    with pytest.raises(ListingNotFound):
        hold(runtime, "nobody.here")
    with pytest.raises(ValidationFailed):
        hold(runtime, reason="  ")


def test_report_hold_with_case(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    listing_id = publish(runtime, connection_id).listing.id
    with runtime.db.transaction() as session:
        catalog.place_hold(
            session,
            service_code=SERVICE_CODE,
            kind="report",
            reason="upheld",
            created_by="acct_staff",
            now=runtime.clock.now(),
            case_id="case_1",
        )
    with runtime.db.read() as session:
        (active,) = catalog.active_holds(session, listing_id=listing_id)
        assert (active.kind, active.case_id) == ("report", "case_1")
    with runtime.db.transaction() as session, pytest.raises(ValidationFailed):
        catalog.place_hold(
            session,
            service_code=SERVICE_CODE,
            kind="whim",
            reason="x",
            created_by="acct_staff",
            now=runtime.clock.now(),
        )


def test_a_listing_without_a_published_version_is_not_public(runtime: Runtime) -> None:
    owner_id, _ = make_provider(runtime)
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session,
            service_code="acme.empty",
            display_name="E",
            owner_id=owner_id,
            now=runtime.clock.now(),
        )
        assert not catalog.is_public(session, listing_id=listing.id)


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM holds WHERE id = :id",
        "UPDATE holds SET released_at = NULL, released_by = NULL WHERE id = :id",
        "UPDATE holds SET reason = 'rewritten' WHERE id = :id",
    ],
    ids=["delete", "unrelease", "rewrite"],
)
def test_database_keeps_hold_history(runtime: Runtime, sql: str) -> None:
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    hold_id = hold(runtime)
    release(runtime, hold_id)
    with pytest.raises(DBAPIError), runtime.db.engine.begin() as conn:
        conn.execute(text(sql), {"id": hold_id})
