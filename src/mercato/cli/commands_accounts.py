"""`mercato admin create-account`, `create-api-key`, `revoke-api-key` and `unlock`."""

from __future__ import annotations

import datetime as dt

import click

from mercato.accounts import service as accounts
from mercato.accounts.errors import (
    AccountNotFound,
    ApiKeyNotFound,
    InvalidApiKeyName,
    InvalidEmail,
    InvalidPassword,
)
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import WholeNumber, command, json_option
from mercato.cli.output import Naming, argument_errors, emit
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


def register(_top: click.Group, admin: click.Group) -> None:
    for handler in (cmd_create_account, cmd_create_api_key, cmd_revoke_api_key, cmd_unlock):
        admin.add_command(handler)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


@command("create-account", help="create an account")
@click.argument("email", metavar="EMAIL")
@click.option("--password", help="without it the account cannot log in")
@click.option("--staff", is_flag=True, help="make the account staff")
@click.option("--points", type=WholeNumber(0, MAX_AMOUNT), default=0, help="grant points")
@json_option()
def cmd_create_account(
    email: str, password: str | None, staff: bool, points: int, as_json: bool
) -> int:
    runtime = runtime_from_env()
    now = runtime.clock.now()
    with argument_errors(_CREATE_ERRORS), runtime.db.transaction() as session:
        account = accounts.create_account(
            session, email=email, password=password, is_staff=staff, now=now
        )
        if points:
            ledger.grant(
                session, account_id=account.id, amount=points, now=now, memo="create-account"
            )
        data = {"accountId": account.id, "email": account.email, "isStaff": account.is_staff}
    emit(data, as_json=as_json, text=f"created account {data['accountId']} <{data['email']}>")
    return 0


@command("create-api-key", help="create an API key (shown once)")
@click.argument("email", metavar="EMAIL")
@click.option("--name", default="cli", show_default=True, help="a label for the key")
@json_option()
def cmd_create_api_key(email: str, name: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    errors = argument_errors({AccountNotFound: "EMAIL", InvalidApiKeyName: "--name"})
    with errors, runtime.db.transaction() as session:
        account = accounts.get_account_by_email(session, email=email)
        created = accounts.create_api_key(
            session, account_id=account.id, name=name, now=runtime.clock.now()
        )
    emit(
        {"apiKey": created.api_key, "keyId": created.key_id},
        as_json=as_json,
        text=f"API key {created.key_id} (shown once, store it now):\n{created.api_key}",
    )
    return 0


@command("revoke-api-key", help="revoke an API key for ever")
@click.argument("key_id", metavar="KEY_ID")
@json_option()
def cmd_revoke_api_key(key_id: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    with argument_errors({ApiKeyNotFound: "KEY_ID"}), runtime.db.transaction() as session:
        key = accounts.revoke_api_key(
            session, key_id=key_id, account_id=None, now=runtime.clock.now()
        )
        data = {"keyId": key.id, "revokedAt": _iso(key.revoked_at)}
    emit(data, as_json=as_json, text=f"revoked API key {data['keyId']}")
    return 0


@command("unlock", help="lift an email's login throttles")
@click.argument("email", metavar="EMAIL")
@json_option()
def cmd_unlock(email: str, as_json: bool) -> int:
    runtime = runtime_from_env()
    with argument_errors({AccountNotFound: "EMAIL"}), runtime.db.transaction() as session:
        forgotten = accounts.unlock_login(session, email=email, settings=runtime.settings)
    data = {"email": accounts.normalize_email(email), "forgottenFailures": forgotten}
    emit(data, as_json=as_json, text=f"lifted the login throttles of {data['email']}")
    return 0
