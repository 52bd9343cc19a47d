"""`mercato admin set-quota EMAIL --policy NAME --limit N --window-seconds S`."""

from __future__ import annotations

import argparse
from typing import Any

from mercato.accounts import service as accounts
from mercato.accounts.errors import AccountNotFound
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import argument_errors, emit, whole_number
from mercato.quotas import service as quotas
from mercato.quotas.errors import InvalidQuota


def register(_top: Any, admin: Any) -> None:
    quota = admin.add_parser("set-quota", help="give an account its own call quota policy")
    quota.add_argument("email", metavar="EMAIL")
    quota.add_argument("--policy", required=True, help="policy name, e.g. standard")
    quota.add_argument(
        "--limit", type=whole_number(1, quotas.MAX_LIMIT), required=True, help="calls per window"
    )
    quota.add_argument(
        "--window-seconds", type=whole_number(1, quotas.MAX_WINDOW_SECONDS), required=True
    )
    quota.add_argument("--json", action="store_true")
    quota.set_defaults(handler=cmd_set_quota)


def cmd_set_quota(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with (
        argument_errors({AccountNotFound: "EMAIL", InvalidQuota: "--policy"}),
        runtime.db.transaction() as session,
    ):
        account = accounts.get_account_by_email(session, email=args.email)
        policy = quotas.set_quota(
            session,
            account_id=account.id,
            policy=args.policy,
            limit=args.limit,
            window_seconds=args.window_seconds,
            now=runtime.clock.now(),
        )
    emit(
        {
            "email": account.email,
            "policy": policy.name,
            "limit": policy.limit,
            "windowSeconds": policy.window_seconds,
        },
        as_json=args.json,
    )
    return 0
