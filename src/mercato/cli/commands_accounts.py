"""`mercato admin create-account`, `create-api-key`, `revoke-api-key` and `unlock`."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from mercato.accounts import service as accounts
from mercato.accounts.errors import AccountNotFound
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import BadArgument, emit


def register(_top: Any, admin: Any) -> None:
    create = admin.add_parser("create-account", help="create an account")
    create.add_argument("email")
    create.add_argument("--password", help="without it the account cannot log in")
    create.add_argument("--staff", action="store_true", help="make the account staff")
    create.add_argument("--points", type=_non_negative, default=0, help="grant points")
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=cmd_create_account)

    key = admin.add_parser("create-api-key", help="create an API key (shown once)")
    key.add_argument("email")
    key.add_argument("--name", default="cli", help="a label for the key")
    key.add_argument("--json", action="store_true")
    key.set_defaults(handler=cmd_create_api_key)

    revoke = admin.add_parser("revoke-api-key", help="revoke an API key for ever")
    revoke.add_argument("key_id")
    revoke.add_argument("--json", action="store_true")
    revoke.set_defaults(handler=cmd_revoke_api_key)

    unlock = admin.add_parser("unlock", help="lift an email's login throttles (decision 0220)")
    unlock.add_argument("email", metavar="EMAIL")
    unlock.add_argument("--json", action="store_true")
    unlock.set_defaults(handler=cmd_unlock)


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be zero or more")
    return number


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def cmd_create_account(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    now = runtime.clock.now()
    with runtime.db.transaction() as session:
        account = accounts.create_account(
            session, email=args.email, password=args.password, is_staff=args.staff, now=now
        )
        if args.points:
            # Imported here: the ledger is a sibling domain, needed only for this option.
            from mercato.ledger import service as ledger

            ledger.grant(
                session, account_id=account.id, amount=args.points, now=now, memo="create-account"
            )
        data = {"accountId": account.id, "email": account.email, "isStaff": account.is_staff}
    emit(data, as_json=args.json, text=f"created account {data['accountId']} <{data['email']}>")
    return 0


def cmd_create_api_key(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with runtime.db.transaction() as session:
        account = accounts.get_account_by_email(session, email=args.email)
        created = accounts.create_api_key(
            session, account_id=account.id, name=args.name, now=runtime.clock.now()
        )
    emit(
        {"apiKey": created.api_key, "keyId": created.key_id},
        as_json=args.json,
        text=f"API key {created.key_id} (shown once, store it now):\n{created.api_key}",
    )
    return 0


def cmd_revoke_api_key(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with runtime.db.transaction() as session:
        key = accounts.revoke_api_key(
            session, key_id=args.key_id, account_id=None, now=runtime.clock.now()
        )
        data = {"keyId": key.id, "revokedAt": _iso(key.revoked_at)}
    emit(data, as_json=args.json, text=f"revoked API key {data['keyId']}")
    return 0


def cmd_unlock(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with runtime.db.transaction() as session:
        try:
            forgotten = accounts.unlock_login(session, email=args.email, settings=runtime.settings)
        except AccountNotFound:
            raise BadArgument("EMAIL", "no account has this email") from None
    data = {"email": accounts.normalize_email(args.email), "forgottenFailures": forgotten}
    emit(data, as_json=args.json, text=f"lifted the login throttles of {data['email']}")
    return 0
