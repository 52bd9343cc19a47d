"""The `mercato` command: serve, worker, migrate, up and the operator `admin` commands."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, NoReturn

from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from mercato.cli import (
    commands_accounts,
    commands_cases,
    commands_catalog,
    commands_client,
    commands_core,
    commands_demo,
    commands_invocations,
    commands_ledger,
    commands_provider,
    commands_providers,
    commands_resolution,
    commands_worker,
)
from mercato.cli.output import (
    EXIT_USAGE,
    BadArgument,
    bad_argument,
    configuration_error,
    database_unreachable,
    fail,
)
from mercato.core.errors import MercatoError
from mercato.settings import SettingsError, beside_demo

Handler = Callable[[argparse.Namespace], int]

# Each module adds its commands: register(top_subparsers, admin_subparsers).
_MODULES: list[Any] = [
    commands_core,
    commands_accounts,
    commands_ledger,
    commands_providers,
    commands_catalog,
    commands_invocations,
    commands_worker,
    commands_cases,
    commands_demo,
    commands_client,
    commands_resolution,
    commands_provider,
]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (no usage block) and exit 2.

    Subparsers are built with the parser's own class, so every command inherits this.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {' '.join(message.split())}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mercato", description="Mercato marketplace")
    top = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    admin_parser = top.add_parser("admin", help="operator commands")
    admin = admin_parser.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    for module in _MODULES:
        module.register(top, admin)
    return parser


def _refuse_undecodable(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """An argument that is not valid UTF-8 cannot be stored or compared: refuse it up front."""
    for position, value in enumerate(argv, start=1):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            parser.error(f"argument {position} is not valid UTF-8 text")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # import-time chatter
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    _refuse_undecodable(parser, arguments)
    args = parser.parse_args(arguments)
    handler: Handler = args.handler
    # `mercato admin ...` beside the demo reads the demo's recorded settings (decision 0271).
    context = beside_demo() if args.command == "admin" else nullcontext()
    try:
        with context:
            return handler(args)
    except BadArgument as exc:
        return bad_argument(exc)
    except (SettingsError, ValidationError) as exc:
        return configuration_error(exc)
    except OperationalError as exc:  # down, refused, wrong credentials, unopenable file
        return database_unreachable(exc)
    except MercatoError as exc:
        return fail(exc)
