"""Connections on both backends: approval needs a full pass; a change lapses it; no plaintext."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from sqlalchemy import MetaData, select, text

from builders.providers import CREDENTIAL, Faults, passing_verdicts, reference_provider
from mercato.accounts import service as accounts
from mercato.conformance.flows import check_connection
from mercato.db.runtime import Runtime
from mercato.dispatch.client import ProviderClient
from mercato.providers import service as providers
from mercato.providers.errors import (
    ConformanceNotPassed,
    ConnectionNameTaken,
    InvalidConnection,
    ProviderAddressForbidden,
)
from mercato.providers.models import ProviderConnection
from mercato.providers.schemas import CheckVerdict
from mercato.settings import Settings

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def client(settings: Settings) -> Iterator[ProviderClient]:
    with ProviderClient(settings) as provider_client:
        yield provider_client


@pytest.fixture
def owner_id(runtime: Runtime) -> str:
    with runtime.db.transaction() as session:
        return accounts.create_account(
            session, email="provider@example.com", password=None, is_staff=False, now=NOW
        ).id


def create(runtime: Runtime, owner_id: str, base_url: str, **kwargs: str) -> str:
    with runtime.db.transaction() as session:
        return providers.create_connection(
            session,
            owner_id=owner_id,
            name=kwargs.get("name", "main"),
            base_url=base_url,
            credential=kwargs.get("credential", CREDENTIAL),
            settings=runtime.settings,
            now=NOW,
        ).id


def approve(runtime: Runtime, connection_id: str) -> None:
    with runtime.db.transaction() as session:
        providers.approve_connection(session, connection_id=connection_id, now=NOW)


def approved(runtime: Runtime, connection_id: str) -> bool:
    with runtime.db.read() as session:
        return providers.is_approved(session, connection_id=connection_id)


def update(runtime: Runtime, connection_id: str, **changes: str) -> int:
    with runtime.db.transaction() as session:
        return providers.update_connection(
            session, connection_id=connection_id, settings=runtime.settings, now=NOW, **changes
        ).revision


def test_approval_is_refused_until_a_full_pass(
    runtime: Runtime, client: ProviderClient, owner_id: str
) -> None:
    with reference_provider(Faults(unknown_key_succeeds=True)) as provider:
        connection_id = create(runtime, owner_id, provider.url)
        with pytest.raises(ConformanceNotPassed):
            approve(runtime, connection_id)

        run = check_connection(runtime, client, connection_id=connection_id)
        assert not run.passed
        assert [c.status for c in run.checks].count("failed") == 1
        with pytest.raises(ConformanceNotPassed) as refused:
            approve(runtime, connection_id)
        assert refused.value.code == "CONFORMANCE_NOT_PASSED"
        assert refused.value.status == 409
        assert not approved(runtime, connection_id)

        provider.state.faults = Faults()
        assert check_connection(runtime, client, connection_id=connection_id).passed
        approve(runtime, connection_id)
        assert approved(runtime, connection_id)

    with runtime.db.read() as session:
        target = providers.get_dispatch_target(
            session, connection_id=connection_id, settings=runtime.settings
        )
        runs = providers.list_runs(session, connection_id=connection_id)
    assert (target.approved, target.credential, target.revision) == (True, CREDENTIAL, 1)
    assert [r.passed for r in runs] == [True, False]
    assert all(len(r.checks) == 9 for r in runs)


def test_a_later_failing_run_on_the_same_revision_blocks_approval(
    runtime: Runtime, client: ProviderClient, owner_id: str
) -> None:
    with reference_provider() as provider:
        connection_id = create(runtime, owner_id, provider.url)
        assert check_connection(runtime, client, connection_id=connection_id).passed
        provider.state.faults = Faults(ready_status=503)
        assert not check_connection(runtime, client, connection_id=connection_id).passed
    with pytest.raises(ConformanceNotPassed):
        approve(runtime, connection_id)


@pytest.mark.parametrize("change", ["base_url", "credential", "name"])
def test_changing_an_approved_connection_lapses_approval_until_a_new_pass(
    runtime: Runtime, client: ProviderClient, owner_id: str, change: str
) -> None:
    new_credential = "rotated-credential-9876"
    with reference_provider() as first, reference_provider() as second:
        connection_id = create(runtime, owner_id, first.url)
        assert check_connection(runtime, client, connection_id=connection_id).passed
        approve(runtime, connection_id)
        assert approved(runtime, connection_id)

        value = {"base_url": second.url, "credential": new_credential, "name": "renamed"}[change]
        if change == "credential":
            # The provider at the old URL now expects the rotated credential.
            first.state.credential = new_credential
        assert update(runtime, connection_id, **{change: value}) == 2
        assert not approved(runtime, connection_id)
        with pytest.raises(ConformanceNotPassed):
            approve(runtime, connection_id)

        run = check_connection(runtime, client, connection_id=connection_id)
        assert run.connection_revision == 2 and run.passed
        approve(runtime, connection_id)
        assert approved(runtime, connection_id)


def test_a_rotated_credential_the_provider_does_not_accept_never_passes(
    runtime: Runtime, client: ProviderClient, owner_id: str
) -> None:
    with reference_provider() as provider:
        connection_id = create(runtime, owner_id, provider.url)
        assert check_connection(runtime, client, connection_id=connection_id).passed
        approve(runtime, connection_id)
        update(runtime, connection_id, credential="not-what-the-provider-expects")
        run = check_connection(runtime, client, connection_id=connection_id)
    assert not run.passed
    assert run.checks[3].status == "failed"  # 401 is not an envelope
    with pytest.raises(ConformanceNotPassed):
        approve(runtime, connection_id)


def test_resubmitting_identical_values_is_not_a_change(runtime: Runtime, owner_id: str) -> None:
    connection_id = create(runtime, owner_id, "http://127.0.0.1:9/base/")
    with runtime.db.transaction() as session:
        providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=1,
            started_at=NOW,
            finished_at=NOW,
            checks=passing_verdicts(),
        )
    approve(runtime, connection_id)
    revision = update(
        runtime,
        connection_id,
        base_url="http://127.0.0.1:9/base",
        credential=CREDENTIAL,
        name="main",
    )
    assert revision == 1
    assert approved(runtime, connection_id)


def test_a_pass_recorded_for_an_older_revision_does_not_count(
    runtime: Runtime, owner_id: str
) -> None:
    connection_id = create(runtime, owner_id, "http://127.0.0.1:9")
    update(runtime, connection_id, base_url="http://127.0.0.1:10")
    # A check that started before the change finishes after it: recorded against revision 1.
    with runtime.db.transaction() as session:
        providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=1,
            started_at=NOW,
            finished_at=NOW + dt.timedelta(minutes=1),
            checks=passing_verdicts(),
        )
    with pytest.raises(ConformanceNotPassed):
        approve(runtime, connection_id)


def test_eight_passes_and_a_skip_is_not_a_pass(runtime: Runtime, owner_id: str) -> None:
    connection_id = create(runtime, owner_id, "http://127.0.0.1:9")
    verdicts = passing_verdicts()
    verdicts[4] = CheckVerdict(5, verdicts[4].name, "skipped", {})
    with runtime.db.transaction() as session:
        run = providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=1,
            started_at=NOW,
            finished_at=NOW,
            checks=verdicts,
        )
    assert not run.passed
    with pytest.raises(ConformanceNotPassed):
        approve(runtime, connection_id)


def test_credential_is_encrypted_at_rest_and_absent_from_every_table(
    runtime: Runtime, client: ProviderClient, owner_id: str
) -> None:
    with reference_provider() as provider:
        connection_id = create(runtime, owner_id, provider.url)
        check_connection(runtime, client, connection_id=connection_id)

    metadata = MetaData()
    metadata.reflect(runtime.db.engine)
    dump: list[str] = []
    tables_with_rows: set[str] = set()
    with runtime.db.engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                dump.append(repr(tuple(row)))
                tables_with_rows.add(table.name)
        ciphertext = conn.execute(
            text("SELECT credential_ciphertext FROM provider_connections")
        ).scalar_one()
    assert any(connection_id in line for line in dump)
    assert not any(CREDENTIAL in line for line in dump)
    assert CREDENTIAL not in ciphertext and ciphertext.startswith("gAAAA")  # a Fernet token
    # The check wrote its run and nothing else: no invocation, receipt, points or quota rows.
    assert tables_with_rows <= {
        "alembic_version",
        "accounts",
        "provider_connections",
        "conformance_runs",
        "conformance_results",
        "hint_generation",  # the connection changed: every process's memory of it is stale
    }
    assert {"conformance_runs", "conformance_results"} <= tables_with_rows


def test_submission_validates_name_url_and_credential(runtime: Runtime, owner_id: str) -> None:
    create(runtime, owner_id, "https://provider.example.com")
    for base_url in ["ftp://x.example", "http://u:p@x.example", "https://x.example/?a=1", "x"]:
        with pytest.raises(InvalidConnection):
            create(runtime, owner_id, base_url, name="other")
    for credential in ["", "has space", "line\r\nbreak", "x" * 1025]:
        with pytest.raises(InvalidConnection):
            create(runtime, owner_id, "https://p.example", name="other", credential=credential)
    with pytest.raises(ConnectionNameTaken):
        create(runtime, owner_id, "https://p.example", name="main")
    with runtime.db.read() as session:
        names = session.scalars(select(ProviderConnection.name)).all()
    assert names == ["main"]


def test_literal_private_addresses_are_refused_at_submission_in_production(
    settings: Settings, owner_id: str
) -> None:
    strict = settings.model_copy(update={"allow_private_provider_addresses": False})
    runtime = Runtime.from_settings(strict)
    try:
        for base_url in ["http://127.0.0.1:8080", "http://[::1]", "http://169.254.169.254"]:
            with pytest.raises(ProviderAddressForbidden):
                create(runtime, owner_id, base_url)
        create(runtime, owner_id, "https://provider.example.com")
    finally:
        runtime.db.dispose()
