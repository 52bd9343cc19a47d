"""`mercato admin grant-points` and `mercato admin verify-ledger`."""

from __future__ import annotations

import argparse
from typing import Any

from mercato.accounts import service as accounts
from mercato.accounts.errors import AccountNotFound
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, argument_errors, emit, whole_number
from mercato.ledger import service as ledger
from mercato.ledger.errors import InvalidLedgerInput


def register(_top: Any, admin: Any) -> None:
    grant = admin.add_parser("grant-points", help="grant points to an account")
    grant.add_argument("email", metavar="EMAIL")
    grant.add_argument("points", type=whole_number(1, ledger.MAX_AMOUNT), metavar="N")
    grant.add_argument("--memo", default="grant-points", help="a note kept on the transfer")
    grant.add_argument("--json", action="store_true")
    grant.set_defaults(handler=cmd_grant_points)

    verify = admin.add_parser("verify-ledger", help="re-prove the ledger's invariants")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_verify_ledger)


def cmd_grant_points(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({AccountNotFound: "EMAIL", InvalidLedgerInput: "--memo"})
    with errors, runtime.db.transaction() as session:
        account = accounts.get_account_by_email(session, email=args.email)
        transfer_id = ledger.grant(
            session,
            account_id=account.id,
            amount=args.points,
            now=runtime.clock.now(),
            memo=args.memo,
        )
        available = ledger.balances(session, account_id=account.id).available
    data = {
        "accountId": account.id,
        "transferId": transfer_id,
        "granted": args.points,
        "available": available,
    }
    emit(
        data,
        as_json=args.json,
        text=f"granted {args.points} points to {args.email}; available now {available}",
    )
    return EXIT_OK


def cmd_verify_ledger(args: argparse.Namespace) -> int:
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
    emit(report.as_dict(), as_json=args.json, text="\n".join(lines))
    return EXIT_OK if report.balanced else EXIT_FAILURE
