"""`mercato admin create-account`, `create-api-key`, `revoke-api-key` and `unlock`."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from mercato.accounts import service as accounts
from mercato.accounts.errors import (
    AccountNotFound,
    ApiKeyNotFound,
    InvalidApiKeyName,
    InvalidEmail,
    InvalidPassword,
)
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import Naming, argument_errors, emit, whole_number
from mercato.core.errors import MercatoError
from mercato.ledger import service as ledger
from mercato.ledger.errors import InvalidLedgerInput
from mercato.ledger.service import MAX_AMOUNT

# An existing email is the account's state, not a malformed argument: that stays exit 1.
_CREATE_ERRORS: dict[type[MercatoError], Naming] = {
    InvalidEmail: "EMAIL",
    InvalidPassword: "--password",
    InvalidLedgerInput: "--points",
}


def register(_top: Any, admin: Any) -> None:
    create = admin.add_parser("create-account", help="create an account")
    create.add_argument("email", metavar="EMAIL")
    create.add_argument("--password", help="without it the account cannot log in")
    create.add_argument("--staff", action="store_true", help="make the account staff")
    create.add_argument(
        "--points", type=whole_number(0, MAX_AMOUNT), default=0, help="grant points"
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=cmd_create_account)

    key = admin.add_parser("create-api-key", help="create an API key (shown once)")
    key.add_argument("email", metavar="EMAIL")
    key.add_argument("--name", default="cli", help="a label for the key")
    key.add_argument("--json", action="store_true")
    key.set_defaults(handler=cmd_create_api_key)

    revoke = admin.add_parser("revoke-api-key", help="revoke an API key for ever")
    revoke.add_argument("key_id", metavar="KEY_ID")
    revoke.add_argument("--json", action="store_true")
    revoke.set_defaults(handler=cmd_revoke_api_key)

    unlock = admin.add_parser("unlock", help="lift an email's login throttles (decision 0220)")
    unlock.add_argument("email", metavar="EMAIL")
    unlock.add_argument("--json", action="store_true")
    unlock.set_defaults(handler=cmd_unlock)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def cmd_create_account(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    now = runtime.clock.now()
    with argument_errors(_CREATE_ERRORS), runtime.db.transaction() as session:
        account = accounts.create_account(
            session, email=args.email, password=args.password, is_staff=args.staff, now=now
        )
        if args.points:
            ledger.grant(
                session, account_id=account.id, amount=args.points, now=now, memo="create-account"
            )
        data = {"accountId": account.id, "email": account.email, "isStaff": account.is_staff}
    emit(data, as_json=args.json, text=f"created account {data['accountId']} <{data['email']}>")
    return 0


def cmd_create_api_key(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({AccountNotFound: "EMAIL", InvalidApiKeyName: "--name"})
    with errors, runtime.db.transaction() as session:
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
    with argument_errors({ApiKeyNotFound: "KEY_ID"}), runtime.db.transaction() as session:
        key = accounts.revoke_api_key(
            session, key_id=args.key_id, account_id=None, now=runtime.clock.now()
        )
        data = {"keyId": key.id, "revokedAt": _iso(key.revoked_at)}
    emit(data, as_json=args.json, text=f"revoked API key {data['keyId']}")
    return 0


def cmd_unlock(args: argparse.Namespace) -> int:
    runtime = runtime_from_env()
    with argument_errors({AccountNotFound: "EMAIL"}), runtime.db.transaction() as session:
        forgotten = accounts.unlock_login(session, email=args.email, settings=runtime.settings)
    data = {"email": accounts.normalize_email(args.email), "forgottenFailures": forgotten}
    emit(data, as_json=args.json, text=f"lifted the login throttles of {data['email']}")
    return 0
