"""The `mercato` command: serve, worker, migrate, up and the operator `admin` commands."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from typing import Any

from mercato.cli import commands_core
from mercato.cli.output import EXIT_USAGE, BadArgument, bad_argument, fail
from mercato.core.errors import MercatoError
from mercato.settings import SettingsError

Handler = Callable[[argparse.Namespace], int]

# Each module adds its commands: register(top_subparsers, admin_subparsers).
_MODULES: list[Any] = [commands_core]


def _optional_modules() -> list[Any]:
    import importlib

    names = [
        "mercato.cli.commands_accounts",
        "mercato.cli.commands_ledger",
        "mercato.cli.commands_providers",
        "mercato.cli.commands_catalog",
        "mercato.cli.commands_invocations",
        "mercato.cli.commands_worker",
        "mercato.cli.commands_cases",
        "mercato.cli.commands_demo",
        "mercato.cli.commands_client",
        "mercato.cli.commands_simulate",
        "mercato.cli.commands_resolution",
    ]
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mercato", description="Mercato marketplace")
    top = parser.add_subparsers(dest="command", required=True)
    admin_parser = top.add_parser("admin", help="operator commands")
    admin = admin_parser.add_subparsers(dest="admin_command", required=True)
    for module in [*_MODULES, *_optional_modules()]:
        module.register(top, admin)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BadArgument as exc:
        return bad_argument(exc)
    except SettingsError as exc:
        parser.exit(EXIT_USAGE, f"configuration error: {exc}\n")
    except MercatoError as exc:
        return fail(exc)
