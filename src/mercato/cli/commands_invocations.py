"""`mercato admin set-quota EMAIL --policy NAME --limit N --window-seconds S`."""

from __future__ import annotations

import click

from mercato.accounts import service as accounts
from mercato.accounts.errors import AccountNotFound
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import WholeNumber, command, json_option
from mercato.cli.output import argument_errors, emit
from mercato.quotas import service as quotas
from mercato.quotas.errors import InvalidQuota


def register(_top: click.Group, admin: click.Group) -> None:
    admin.add_command(cmd_set_quota)


@command("set-quota", help="give an account its own call quota policy")
@click.argument("email", metavar="EMAIL")
@click.option("--policy", required=True, help="policy name, e.g. standard")
@click.option(
    "--limit", type=WholeNumber(1, quotas.MAX_LIMIT), required=True, help="calls per window"
)
@click.option("--window-seconds", type=WholeNumber(1, quotas.MAX_WINDOW_SECONDS), required=True)
@json_option()
def cmd_set_quota(email: str, policy: str, limit: int, window_seconds: int, as_json: bool) -> int:
    runtime = runtime_from_env()
    with (
        argument_errors({AccountNotFound: "EMAIL", InvalidQuota: "--policy"}),
        runtime.db.transaction() as session,
    ):
        account = accounts.get_account_by_email(session, email=email)
        chosen = quotas.set_quota(
            session,
            account_id=account.id,
            policy=policy,
            limit=limit,
            window_seconds=window_seconds,
            now=runtime.clock.now(),
        )
    emit(
        {
            "email": account.email,
            "policy": chosen.name,
            "limit": chosen.limit,
            "windowSeconds": chosen.window_seconds,
        },
        as_json=as_json,
    )
    return 0
