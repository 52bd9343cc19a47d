"""`mercato admin grant-points` and `mercato admin verify-ledger`."""

from __future__ import annotations

import click

from mercato.accounts import service as accounts
from mercato.accounts.errors import AccountNotFound
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import WholeNumber, command, json_option
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, argument_errors, emit
from mercato.ledger import service as ledger
from mercato.ledger.errors import InvalidLedgerInput


def register(_top: click.Group, admin: click.Group) -> None:
    admin.add_command(cmd_grant_points)
    admin.add_command(cmd_verify_ledger)


@command("grant-points", help="grant points to an account")
@click.argument("email", metavar="EMAIL")
@click.argument("points", metavar="N", type=WholeNumber(1, ledger.MAX_AMOUNT))
@click.option("--memo", default="grant-points", help="a note kept on the transfer")
@json_option()
def cmd_grant_points(email: str, points: int, memo: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({AccountNotFound: "EMAIL", InvalidLedgerInput: "--memo"})
    with errors, runtime.db.transaction() as session:
        account = accounts.get_account_by_email(session, email=email)
        transfer_id = ledger.grant(
            session,
            account_id=account.id,
            amount=points,
            now=runtime.clock.now(),
            memo=memo,
        )
        available = ledger.balances(session, account_id=account.id).available
    data = {
        "accountId": account.id,
        "transferId": transfer_id,
        "granted": points,
        "available": available,
    }
    emit(
        data,
        as_json=as_json,
        text=f"granted {points} points to {email}; available now {available}",
    )
    return EXIT_OK


@command("verify-ledger", help="re-prove the ledger's invariants")
@json_option()
def cmd_verify_ledger(as_json: bool) -> int:
    runtime = runtime_from_env()
    with runtime.db.read() as session:
        if session.get_bind().dialect.name == "postgresql":
            # One snapshot for every query, so concurrent writers cannot fake a problem.
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        report = ledger.verify(session)
    lines = [
        f"balanced: {str(report.balanced).lower()}",
        f"issued: {report.issued}  circulating: {report.circulating}",
        f"available: {report.available}  reserved: {report.reserved}  "
        f"earnings: {report.earnings}  revenue: {report.revenue}",
        *(f"problem: {problem}" for problem in report.problems),
    ]
    emit(report.as_dict(), as_json=as_json, text="\n".join(lines))
    return EXIT_OK if report.balanced else EXIT_FAILURE
