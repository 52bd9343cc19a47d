"""`mercato admin add-connection`, `update-connection`, `check-connection`, `approve-connection`.

Submitting or changing a connection commits first and then runs the conformance check (network,
outside any transaction), which records its run in a short transaction of its own. An argument
the services refuse (an unknown owner or connection, a name, URL or credential they reject, a
base URL naming a non-public address) exits 2 with one line naming it, before anything is sent.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from sqlalchemy.orm import Session

from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import command, json_option
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, BadArgument, emit
from mercato.conformance.flows import change_connection, check_connection, submit_connection
from mercato.core.errors import MercatoError
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.errors import ConnectionNotFound
from mercato.providers.schemas import RunView

# The settings' own bound on the ceiling; the configured ceiling is checked by the service.
MAX_IN_FLIGHT_LIMIT = 1_000_000


def register(_top: click.Group, admin: click.Group) -> None:
    for handler in (
        cmd_add_connection,
        cmd_update_connection,
        cmd_check_connection,
        cmd_approve_connection,
    ):
        admin.add_command(handler)


def _credential(value: str | None) -> str | None:
    if value == "-":
        return sys.stdin.readline().strip()
    return value


# The option that carries each member a connection error names (`field`).
_FLAGS = {
    "name": "--name",
    "baseUrl": "--base-url",
    "credential": "--credential",
    "maxInFlight": "--max-in-flight",
}


@contextmanager
def _arguments_checked() -> Iterator[None]:
    """Turn a service's refusal of an argument into BadArgument naming the option."""
    try:
        yield
    except ConnectionNotFound:
        raise BadArgument("ID", "no such provider connection") from None
    except MercatoError as error:
        flag = _FLAGS.get(error.extra.get("field", ""))
        if flag is None:
            raise
        raise BadArgument(flag, error.message) from None


def _owner_id(session: Session, email: str) -> str:
    from mercato.accounts import service as accounts
    from mercato.accounts.errors import AccountNotFound

    try:
        return accounts.get_account_by_email(session, email=email).id
    except AccountNotFound:
        raise BadArgument("--owner", "no account has this email") from None


def _check(runtime: Runtime, connection_id: str) -> RunView:
    with runtime.provider_client() as client, _arguments_checked():
        return check_connection(runtime, client, connection_id=connection_id)


def _run_json(run: RunView) -> dict[str, Any]:
    return {
        "runId": run.run_id,
        "revision": run.connection_revision,
        "passed": run.passed,
        "checks": [check.to_json() for check in run.checks],
    }


def _run_text(run: RunView) -> str:
    lines = [f"conformance check: {'passed' if run.passed else 'NOT passed'}"]
    for check in run.checks:
        lines.append(f"  {check.position}. {check.name}: {check.status}  {check.detail}")
    return "\n".join(lines)


@command("add-connection", help="submit a provider connection and check it")
@click.option("--owner", required=True, help="email of the owning account")
@click.option("--name", required=True)
@click.option("--base-url", required=True)
@click.option("--credential", required=True, help="the bearer credential; '-' reads stdin")
@json_option()
def cmd_add_connection(owner: str, name: str, base_url: str, credential: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    with runtime.db.read() as session:
        owner_id = _owner_id(session, owner)
    with runtime.provider_client() as client, _arguments_checked():
        submitted = submit_connection(
            runtime,
            client,
            owner_id=owner_id,
            name=name,
            base_url=base_url,
            credential=_credential(credential) or "",
        )
    connection_id, run = submitted.connection_id, submitted.run
    emit(
        {"connectionId": connection_id, "check": _run_json(run)},
        as_json=as_json,
        text=f"created connection {connection_id}\n{_run_text(run)}",
    )
    return EXIT_OK


@command("update-connection", help="change name, URL or credential (approval lapses)")
@click.argument("connection_id", metavar="ID")
@click.option("--name")
@click.option("--base-url")
@click.option("--credential", help="the new credential; '-' reads stdin")
@click.option(
    "--max-in-flight",
    type=click.IntRange(1, MAX_IN_FLIGHT_LIMIT),
    help="calls in flight per serve process (up to the ceiling; lapses no approval)",
)
@json_option()
def cmd_update_connection(
    connection_id: str,
    name: str | None,
    base_url: str | None,
    credential: str | None,
    max_in_flight: int | None,
    as_json: bool,
) -> int:
    runtime = runtime_from_env()
    with runtime.provider_client() as client, _arguments_checked():
        changed = change_connection(
            runtime,
            client,
            connection_id=connection_id,
            name=name,
            base_url=base_url,
            credential=_credential(credential),
            max_in_flight=max_in_flight,
        )
    data: dict[str, Any] = {
        "connectionId": changed.connection_id,
        "revision": changed.revision,
        "approved": changed.approved,
    }
    text = f"connection {changed.connection_id} is at revision {changed.revision}"
    if max_in_flight is not None:
        data["maxInFlight"] = max_in_flight
    if changed.run is not None:
        data["check"] = _run_json(changed.run)
        text += " (approval lapsed)\n" + _run_text(changed.run)
    elif max_in_flight is not None:
        text += f" (maxInFlight {max_in_flight}; approval unchanged)"
    else:
        text += " (nothing changed)"
    emit(data, as_json=as_json, text=text)
    return EXIT_OK


@command("check-connection", help="run the nine conformance checks now")
@click.argument("connection_id", metavar="ID")
@json_option()
def cmd_check_connection(connection_id: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    run = _check(runtime, connection_id)
    data = {"passed": run.passed, "checks": [check.to_json() for check in run.checks]}
    emit(data | {"runId": run.run_id}, as_json=as_json, text=_run_text(run))
    return EXIT_OK if run.passed else EXIT_FAILURE


@command("approve-connection", help="approve a connection whose latest check passed all nine")
@click.argument("connection_id", metavar="ID")
@json_option()
def cmd_approve_connection(connection_id: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    with _arguments_checked(), runtime.db.transaction() as session:
        connection = providers.approve_connection(
            session, connection_id=connection_id, now=runtime.clock.now()
        )
        revision = connection.revision
    emit(
        {"connectionId": connection_id, "approved": True, "revision": revision},
        as_json=as_json,
        text=f"approved connection {connection_id} at revision {revision}",
    )
    return EXIT_OK
