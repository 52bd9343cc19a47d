"""`mercato admin stuck-invocations` and `resolve-invocation` (DESIGN.md §3, §10)."""

from __future__ import annotations

import click

from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import command, json_option, one_of
from mercato.cli.output import BadArgument, emit, table
from mercato.invocations import service as invocations
from mercato.invocations.errors import InvalidResolution, InvocationNotFound
from mercato.invocations.schemas import Decision

OPERATOR = "operator:cli"


def register(_top: click.Group, admin: click.Group) -> None:
    admin.add_command(cmd_stuck)
    admin.add_command(cmd_resolve)


@command("stuck-invocations", help="list pending calls whose outcome stayed unknown")
@json_option()
def cmd_stuck(as_json: bool) -> int:
    """Print the stuck calls, oldest first."""
    runtime = runtime_from_env()
    try:
        with runtime.db.read() as session:
            items = invocations.list_stuck(session)
    finally:
        runtime.db.dispose()
    if as_json:
        emit({"items": [c.to_json() for c in items]}, as_json=True)
        return 0
    table(
        ("INVOCATION", "SERVICE", "VERSION", "ACCEPTED", "RECONCILIATIONS"),
        (
            (c.invocation_id, c.service_code, c.version, c.to_json()["acceptedAt"], c.attempts)
            for c in items
        ),
        empty="no stuck invocations",
    )
    return 0


@command("resolve-invocation", help="settle or release a pending call, once, with a reason")
@click.argument("invocation_id", metavar="ID")
@click.option("--succeeded", is_flag=True, help="settle it: the provider did the work")
@click.option("--failed", is_flag=True, help="release the reservation")
@click.option("--reason", required=True)
@json_option()
def cmd_resolve(
    invocation_id: str, succeeded: bool, failed: bool, reason: str, as_json: bool
) -> int:
    """Settle or release a pending call; a second resolution changes nothing and exits 1."""
    flags = {"--succeeded": Decision.SUCCEEDED, "--failed": Decision.FAILED}
    decision: Decision = one_of(flags, {"--succeeded": succeeded, "--failed": failed})
    try:
        invocations.check_reason(reason)
    except InvalidResolution as error:
        raise BadArgument("--reason", error.message) from None
    runtime = runtime_from_env()
    try:
        with runtime.db.transaction() as session:
            view = invocations.resolve(
                session,
                invocation_id=invocation_id,
                decision=decision,
                reason=reason,
                actor=OPERATOR,
                now=runtime.clock.now(),
            )
    except InvocationNotFound:
        raise BadArgument("ID", f"there is no invocation {invocation_id!r}") from None
    finally:
        runtime.db.dispose()
    emit(
        {"invocationId": view.invocation_id, "settlement": view.settlement},
        as_json=as_json,
        text=f"invocation {view.invocation_id} resolved as {decision.value}: {view.settlement}",
    )
    return 0
