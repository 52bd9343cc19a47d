"""Versions: drafts change, publication freezes, numbers are never reused (code and database)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from builders.accounts import make_account
from builders.catalog import (
    EXAMPLE_CONTRACT,
    SERVICE_CODE,
    example_contract,
    facts,
    make_connection,
    make_provider,
    publish,
)
from mercato.catalog import service as catalog
from mercato.catalog.errors import (
    ConnectionMismatch,
    ConnectionNotApproved,
    ServiceCodeTaken,
    VersionImmutable,
    VersionNotFound,
    VersionNumberTaken,
)
from mercato.catalog.models import Version
from mercato.core.clock import utcnow
from mercato.db.runtime import Runtime


def _version_row(runtime: Runtime, version_id: str) -> Version:
    with runtime.db.read() as session:
        row = session.get(Version, version_id)
        assert row is not None
        session.expunge(row)  # keep the loaded values after the read's rollback
        return row


def test_publish_creates_listing_and_frozen_version(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    result = publish(runtime, connection_id)
    assert result.created
    assert result.listing.owner_id == owner_id
    assert result.listing.provider_share_bps == catalog.DEFAULT_PROVIDER_SHARE_BPS
    row = _version_row(runtime, result.version.id)
    assert (row.state, row.label, row.number, row.price) == ("PUBLISHED", "v1", 1, 10)
    assert row.published_at is not None
    assert row.contract_digest == row.contract["contractDigest"]


CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("price", {"price": 11}),
    ("display name", {"display_name": "Another name"}),
    ("request limit", {"contract": example_contract(requestMaxBytes=1024)}),
    ("request schema", {"contract": example_contract(requestSchema={"type": "object"})}),
    ("adapter", {"contract": example_contract(adapterRef="vetted.http-json/v2")}),
    ("artifact contract", {"contract": example_contract(artifactContract=None)}),
    ("artifact contract body", {"contract": example_contract(artifactContract={"x": 1})}),
]


@pytest.mark.parametrize(("case", "change"), CHANGES, ids=[c for c, _ in CHANGES])
def test_republishing_v1_with_any_change_is_refused(
    runtime: Runtime, case: str, change: dict[str, Any]
) -> None:
    _, connection_id = make_provider(runtime)
    first = publish(runtime, connection_id)
    with pytest.raises(VersionImmutable) as caught:
        publish(runtime, connection_id, **change)
    assert caught.value.status == 409 and caught.value.code == "VERSION_IMMUTABLE"
    row = _version_row(runtime, first.version.id)
    assert row.price == 10 and row.contract == first.version.contract


def test_republishing_v1_on_another_connection_is_refused(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    other = make_connection(runtime, owner_id, name="second")
    publish(runtime, connection_id)
    with pytest.raises(VersionImmutable):
        publish(runtime, other)


def test_republishing_identical_v1_is_a_no_op(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    first = publish(runtime, connection_id)
    again = publish(runtime, connection_id)
    assert not again.created
    assert again.version.id == first.version.id
    assert again.version.published_at == first.version.published_at


def test_v2_beside_v1_leaves_v1_unchanged(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    v1 = publish(runtime, connection_id)
    v2 = publish(
        runtime,
        connection_id,
        version="v2",
        price=12,
        contract=example_contract(requestMaxBytes=4096),
    )
    assert v2.version.number == 2 and v2.version.listing_id == v1.version.listing_id
    row = _version_row(runtime, v1.version.id)
    assert (row.price, row.contract, row.contract_digest) == (
        10,
        v1.version.contract,
        v1.version.contract_digest,
    )


def test_publishing_needs_an_approved_connection(runtime: Runtime) -> None:
    owner_id = make_account(runtime.db, "provider@example.com")
    connection_id = make_connection(runtime, owner_id, approved=False)
    with pytest.raises(ConnectionNotApproved) as caught:
        publish(runtime, connection_id)
    assert caught.value.status == 409
    with runtime.db.read() as session, pytest.raises(VersionNotFound):
        catalog.get_invocable_version(session, service_code=SERVICE_CODE, version="v1")


def test_connection_must_belong_to_the_listing_owner(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    _, stranger_connection = make_provider(runtime, "stranger@example.com")
    with pytest.raises(ConnectionMismatch):
        publish(runtime, stranger_connection, version="v2")


def test_drafts_can_change_until_published(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    connection = facts(runtime, connection_id)
    now = utcnow()
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session, service_code="acme.echo", display_name="Echo", owner_id=owner_id, now=now
        )
        draft = catalog.create_draft(
            session,
            listing_id=listing.id,
            version="v1",
            connection=connection,
            price=5,
            contract=example_contract(),
            now=now,
        )
        catalog.update_draft(
            session,
            version_id=draft.id,
            price=7,
            contract=example_contract(responseMaxBytes=1000),
            now=now,
        )
        draft_id = draft.id
    with runtime.db.transaction() as session:
        catalog.publish_version(session, version_id=draft_id, connection=connection, now=now)
    row = _version_row(runtime, draft_id)
    assert (row.state, row.price, row.contract["responseMaxBytes"]) == ("PUBLISHED", 7, 1000)
    with runtime.db.transaction() as session, pytest.raises(VersionImmutable):
        catalog.update_draft(session, version_id=draft_id, price=8, now=now)


def test_a_version_number_is_taken_even_by_a_draft(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    connection = facts(runtime, connection_id)
    now = utcnow()
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session, service_code="acme.echo", display_name="Echo", owner_id=owner_id, now=now
        )
        catalog.create_draft(
            session,
            listing_id=listing.id,
            version="v1",
            connection=connection,
            price=5,
            contract=example_contract(),
            now=now,
        )
        listing_id = listing.id
    with runtime.db.transaction() as session, pytest.raises(VersionNumberTaken):
        catalog.create_draft(
            session,
            listing_id=listing_id,
            version="v1",
            connection=connection,
            price=6,
            contract=example_contract(),
            now=now,
        )


def _raw(runtime: Runtime, sql: str, **params: Any) -> None:
    with runtime.db.engine.begin() as conn:
        conn.execute(text(sql), params)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE versions SET price = 1 WHERE id = :id",
        "UPDATE versions SET number = 9 WHERE id = :id",
        "UPDATE versions SET contract_digest = 'x' WHERE id = :id",
        "UPDATE versions SET state = 'DRAFT', published_at = NULL WHERE id = :id",
        "UPDATE versions SET connection_id = :other WHERE id = :id",
        "DELETE FROM versions WHERE id = :id",
    ],
    ids=["price", "number", "digest", "unpublish", "connection", "delete"],
)
def test_database_refuses_changing_a_published_version(runtime: Runtime, sql: str) -> None:
    owner_id, connection_id = make_provider(runtime)
    other = make_connection(runtime, owner_id, name="other")
    result = publish(runtime, connection_id)
    with pytest.raises(DBAPIError) as caught:
        _raw(runtime, sql, id=result.version.id, other=other)
    assert "VERSION_IMMUTABLE" in str(caught.value)
    row = _version_row(runtime, result.version.id)
    assert (row.price, row.number, row.state, row.connection_id) == (
        10,
        1,
        "PUBLISHED",
        connection_id,
    )


def test_database_refuses_changing_a_published_contract(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    result = publish(runtime, connection_id)
    with pytest.raises(DBAPIError), runtime.db.transaction() as session:
        row = session.get(Version, result.version.id)
        assert row is not None
        row.contract = {**row.contract, "requestMaxBytes": 1}
    assert _version_row(runtime, result.version.id).contract["requestMaxBytes"] == 65536


def test_database_refuses_reusing_a_number(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    v1 = publish(runtime, connection_id)
    v2 = publish(runtime, connection_id, version="v2")
    with pytest.raises(DBAPIError):
        _raw(
            runtime, "UPDATE versions SET number = 1, label = 'v1' WHERE id = :id", id=v2.version.id
        )
    assert _version_row(runtime, v1.version.id).number == 1


def test_database_refuses_changing_a_service_code_or_deleting_a_listing(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    result = publish(runtime, connection_id)
    with pytest.raises(DBAPIError):
        _raw(
            runtime, "UPDATE listings SET service_code = 'x.y' WHERE id = :id", id=result.listing.id
        )
    with pytest.raises(DBAPIError):
        _raw(runtime, "DELETE FROM listings WHERE id = :id", id=result.listing.id)


def test_database_allows_editing_a_draft(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    connection = facts(runtime, connection_id)
    now = utcnow()
    with runtime.db.transaction() as session:
        listing = catalog.create_listing(
            session, service_code="acme.echo", display_name="Echo", owner_id=owner_id, now=now
        )
        draft = catalog.create_draft(
            session,
            listing_id=listing.id,
            version="v1",
            connection=connection,
            price=5,
            contract=example_contract(),
            now=now,
        )
    _raw(runtime, "UPDATE versions SET price = 6 WHERE id = :id", id=draft.id)
    assert _version_row(runtime, draft.id).price == 6


def test_invocable_version_carries_what_invoke_needs(runtime: Runtime) -> None:
    owner_id, connection_id = make_provider(runtime)
    result = publish(runtime, connection_id, provider_share_bps=7000)
    with runtime.db.read() as session:
        found = catalog.get_invocable_version(session, service_code=SERVICE_CODE, version="v1")
    assert found.version_id == result.version.id
    assert (found.price, found.request_max_bytes, found.response_max_bytes) == (10, 65536, 262144)
    assert found.provider_account_id == owner_id and found.provider_share_bps == 7000
    assert found.connection_id == connection_id and found.has_artifact_contract
    assert found.contract["requestSchema"] == EXAMPLE_CONTRACT["requestSchema"]
    assert found.contract_digest == found.contract["contractDigest"]


@pytest.mark.parametrize("label", ["latest", "v2", "v01", "1"])
def test_invocable_version_is_exact(runtime: Runtime, label: str) -> None:
    _, connection_id = make_provider(runtime)
    publish(runtime, connection_id)
    with runtime.db.read() as session, pytest.raises(VersionNotFound):
        catalog.get_invocable_version(session, service_code=SERVICE_CODE, version=label)


def test_concurrent_publishers_leave_one_listing_and_one_v1(runtime: Runtime) -> None:
    _, connection_id = make_provider(runtime)
    barrier = threading.Barrier(4)
    outcomes: list[object] = []
    lock = threading.Lock()

    def publisher() -> None:
        barrier.wait(timeout=30)
        try:
            outcome: object = publish(runtime, connection_id).created
        except (ServiceCodeTaken, VersionNumberTaken) as exc:
            outcome = exc.code
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=publisher) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 4
    assert outcomes.count(True) == 1
    assert set(outcomes) - {True} <= {False, "SERVICE_CODE_TAKEN", "VERSION_NUMBER_TAKEN"}
    with runtime.db.read() as session:
        assert session.scalar(text("SELECT count(*) FROM listings")) == 1
        assert session.scalar(text("SELECT count(*) FROM versions")) == 1
