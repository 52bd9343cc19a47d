"""`mercato admin create-account`, `create-api-key`, `set-key-limit`, `revoke-api-key` and
`unlock`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

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
from mercato.cli.output import BadArgument, Naming, argument_errors, emit
from mercato.core.errors import MercatoError
from mercato.invocations import spend
from mercato.ledger import service as ledger
from mercato.ledger.errors import InvalidLedgerInput
from mercato.ledger.service import MAX_AMOUNT

F = TypeVar("F", bound=Callable[..., Any])

# An existing email is the account's state, not a malformed argument: that stays exit 1.
_CREATE_ERRORS: dict[type[MercatoError], Naming] = {
    InvalidEmail: "EMAIL",
    InvalidPassword: "--password",
    InvalidLedgerInput: "--points",
}


def register(_top: click.Group, admin: click.Group) -> None:
    for handler in (
        cmd_create_account,
        cmd_create_api_key,
        cmd_set_key_limit,
        cmd_revoke_api_key,
        cmd_unlock,
    ):
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


_PERIODS = click.Choice([p.value.lower() for p in spend.Period], case_sensitive=False)


def _spend_limit_options(handler: F) -> F:
    handler = click.option(
        "--period", type=_PERIODS, help="the limit's period (UTC): day, week, month or total"
    )(handler)
    return click.option(
        "--spend-limit",
        "spend_limit",
        type=WholeNumber(0, spend.MAX_POINTS),
        help="the most points the key may spend per period (with --period)",
    )(handler)


def _limit_of(points: int | None, period: str | None) -> tuple[int, spend.Period] | None:
    """The limit the options give (None: none); both or neither, else a bad argument."""
    if points is None and period is None:
        return None
    if points is None:
        raise BadArgument("--spend-limit", "--period needs --spend-limit N")
    if period is None:
        raise BadArgument("--period", "--spend-limit needs --period day|week|month|total")
    return points, spend.Period(period.upper())


def _limit_text(found: spend.KeySpend) -> str:
    if found.points is None or found.period is None:
        return "no spend limit"
    return f"spend limit {found.points} points per {found.period.value.lower()}"


@command("create-api-key", help="create an API key (shown once)")
@click.argument("email", metavar="EMAIL")
@click.option("--name", default="cli", show_default=True, help="a label for the key")
@_spend_limit_options
@json_option()
def cmd_create_api_key(
    email: str, name: str, spend_limit: int | None, period: str | None, as_json: bool
) -> int:
    limit = _limit_of(spend_limit, period)
    runtime = runtime_from_env()
    now = runtime.clock.now()
    errors = argument_errors({AccountNotFound: "EMAIL", InvalidApiKeyName: "--name"})
    with errors, runtime.db.transaction() as session:
        account = accounts.get_account_by_email(session, email=email)
        created = accounts.create_api_key(session, account_id=account.id, name=name, now=now)
        found = spend.set_limit(
            session, key_id=created.key_id, account_id=account.id, limit=limit, now=now
        )
    data: dict[str, object] = {"apiKey": created.api_key, "keyId": created.key_id}
    if limit is not None:
        data["spendLimit"] = found.limit()
    emit(
        data,
        as_json=as_json,
        text=f"API key {created.key_id}, {_limit_text(found)} (shown once, store it now):\n"
        f"{created.api_key}",
    )
    return 0


@command("set-key-limit", help="set or remove an API key's spend limit")
@click.argument("key_id", metavar="KEY_ID")
@_spend_limit_options
@click.option("--none", "remove", is_flag=True, help="remove the key's spend limit")
@json_option()
def cmd_set_key_limit(
    key_id: str, spend_limit: int | None, period: str | None, remove: bool, as_json: bool
) -> int:
    limit = _limit_of(spend_limit, period)
    if remove and limit is not None:
        raise BadArgument("--none", "not allowed with --spend-limit and --period")
    if not remove and limit is None:
        raise BadArgument("--spend-limit", "give --spend-limit N --period P, or --none")
    runtime = runtime_from_env()
    now = runtime.clock.now()
    with argument_errors({ApiKeyNotFound: "KEY_ID"}), runtime.db.transaction() as session:
        found = spend.set_limit(session, key_id=key_id, account_id=None, limit=limit, now=now)
    data = {
        "keyId": key_id,
        "spendLimit": found.limit(),
        "spentInPeriod": found.spent_in_period,
        "periodResetsAt": spend.iso(found.period_resets_at),
    }
    emit(data, as_json=as_json, text=f"API key {key_id}: {_limit_text(found)}")
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
