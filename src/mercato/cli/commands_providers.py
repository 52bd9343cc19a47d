"""`mercato admin add-connection`, `update-connection`, `check-connection`, `approve-connection`.

Submitting or changing a connection commits first and then runs the conformance check (network,
outside any transaction), which records its run in a short transaction of its own. An argument
the services refuse (an unknown owner or connection, a name, URL or credential they reject, a
base URL naming a non-public address) exits 2 with one line naming it, before anything is sent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, BadArgument, emit
from mercato.conformance.flows import change_connection, check_connection, submit_connection
from mercato.core.errors import MercatoError
from mercato.db.runtime import Runtime
from mercato.providers import service as providers
from mercato.providers.errors import ConnectionNotFound
from mercato.providers.schemas import RunView


def register(_top: Any, admin: Any) -> None:
    add = admin.add_parser("add-connection", help="submit a provider connection and check it")
    add.add_argument("--owner", required=True, help="email of the owning account")
    add.add_argument("--name", required=True)
    add.add_argument("--base-url", required=True)
    add.add_argument("--credential", required=True, help="the bearer credential; '-' reads stdin")
    add.add_argument("--json", action="store_true")
    add.set_defaults(handler=cmd_add_connection)

    update = admin.add_parser(
        "update-connection", help="change name, URL or credential (lapses approval) and re-check"
    )
    update.add_argument("connection_id", metavar="ID")
    update.add_argument("--name")
    update.add_argument("--base-url")
    update.add_argument("--credential", help="the new credential; '-' reads stdin")
    update.add_argument("--json", action="store_true")
    update.set_defaults(handler=cmd_update_connection)

    check = admin.add_parser("check-connection", help="run the nine conformance checks now")
    check.add_argument("connection_id", metavar="ID")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=cmd_check_connection)

    approve = admin.add_parser(
        "approve-connection", help="approve a connection whose latest check passed all nine"
    )
    approve.add_argument("connection_id", metavar="ID")
    approve.add_argument("--json", action="store_true")
    approve.set_defaults(handler=cmd_approve_connection)


def _credential(value: str | None) -> str | None:
    if value == "-":
        return sys.stdin.readline().strip()
    return value


# The option that carries each member a connection error names (`field`).
_FLAGS = {"name": "--name", "baseUrl": "--base-url", "credential": "--credential"}


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


def cmd_add_connection(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with runtime.db.read() as session:
        owner_id = _owner_id(session, args.owner)
    with runtime.provider_client() as client, _arguments_checked():
        submitted = submit_connection(
            runtime,
            client,
            owner_id=owner_id,
            name=args.name,
            base_url=args.base_url,
            credential=_credential(args.credential) or "",
        )
    connection_id, run = submitted.connection_id, submitted.run
    emit(
        {"connectionId": connection_id, "check": _run_json(run)},
        as_json=args.json,
        text=f"created connection {connection_id}\n{_run_text(run)}",
    )
    return EXIT_OK


def cmd_update_connection(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with runtime.provider_client() as client, _arguments_checked():
        changed = change_connection(
            runtime,
            client,
            connection_id=args.connection_id,
            name=args.name,
            base_url=args.base_url,
            credential=_credential(args.credential),
        )
    data: dict[str, Any] = {
        "connectionId": changed.connection_id,
        "revision": changed.revision,
        "approved": changed.approved,
    }
    text = f"connection {changed.connection_id} is at revision {changed.revision}"
    if changed.run is not None:
        data["check"] = _run_json(changed.run)
        text += " (approval lapsed)\n" + _run_text(changed.run)
    else:
        text += " (nothing changed)"
    emit(data, as_json=args.json, text=text)
    return EXIT_OK


def cmd_check_connection(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    run = _check(runtime, args.connection_id)
    data = {"passed": run.passed, "checks": [check.to_json() for check in run.checks]}
    emit(data | {"runId": run.run_id}, as_json=args.json, text=_run_text(run))
    return EXIT_OK if run.passed else EXIT_FAILURE


def cmd_approve_connection(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with _arguments_checked(), runtime.db.transaction() as session:
        connection = providers.approve_connection(
            session, connection_id=args.connection_id, now=runtime.clock.now()
        )
        revision = connection.revision
    emit(
        {"connectionId": args.connection_id, "approved": True, "revision": revision},
        as_json=args.json,
        text=f"approved connection {args.connection_id} at revision {revision}",
    )
    return EXIT_OK
