"""Check a stored connection: read the target (short tx), call the provider (no tx), record."""

from __future__ import annotations

from dataclasses import dataclass

from mercato.conformance.checks import Probe
from mercato.conformance.runner import ConformanceReport, run_conformance
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.schemas import RunView


def check_connection(runtime: Runtime, client: Probe, *, connection_id: str) -> RunView:
    """Run the nine checks on the connection's current revision and store the run.

    The run is recorded against the revision that was checked; if the connection changed while
    the calls were in flight, the result simply does not count for the new revision.
    """
    with runtime.db.read() as session:
        target = providers.get_dispatch_target(
            session, connection_id=connection_id, settings=runtime.settings
        )
    started_at = runtime.clock.now()
    report: ConformanceReport = run_conformance(client, target)
    finished_at = runtime.clock.now()
    with runtime.db.transaction() as session:
        return providers.record_run(
            session,
            connection_id=connection_id,
            connection_revision=target.revision,
            started_at=started_at,
            finished_at=finished_at,
            checks=report.checks,
        )


@dataclass(frozen=True, slots=True)
class Submitted:
    connection_id: str
    run: RunView


@dataclass(frozen=True, slots=True)
class Changed:
    connection_id: str
    revision: int
    approved: bool
    run: RunView | None  # None when nothing actually changed (no new check needed)


def submit_connection(
    runtime: Runtime,
    client: Probe,
    *,
    owner_id: str,
    name: str,
    base_url: str,
    credential: str,
) -> Submitted:
    """Store a new connection (committed), then check it automatically."""
    with runtime.db.transaction() as session:
        connection_id = providers.create_connection(
            session,
            owner_id=owner_id,
            name=name,
            base_url=base_url,
            credential=credential,
            settings=runtime.settings,
            now=runtime.clock.now(),
        ).id
    return Submitted(connection_id, check_connection(runtime, client, connection_id=connection_id))


def change_connection(
    runtime: Runtime,
    client: Probe,
    *,
    connection_id: str,
    name: str | None = None,
    base_url: str | None = None,
    credential: str | None = None,
    max_in_flight: int | None = None,
) -> Changed:
    """Change a connection (committed; approval lapses), then re-check it if anything changed.
    `max_in_flight` is no part of the revision: it alone lapses nothing and runs no check."""
    with runtime.db.transaction() as session:
        before = providers.get_connection(session, connection_id=connection_id).revision
        connection = providers.update_connection(
            session,
            connection_id=connection_id,
            settings=runtime.settings,
            now=runtime.clock.now(),
            name=name,
            base_url=base_url,
            credential=credential,
            max_in_flight=max_in_flight,
        )
        revision, approved = connection.revision, connection.approved
    run = None
    if revision != before:
        run = check_connection(runtime, client, connection_id=connection_id)
    return Changed(connection_id, revision, approved, run)
