"""The `mercato` command: serve, worker, migrate, up and the operator `admin` commands.

Built on click (decision 0300): `mercato --version`, shell completion
(`eval "$(_MERCATO_COMPLETE=bash_source mercato)"`), and every usage error as one line, exit 2.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import click
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
from mercato.cli.framework import MercatoGroup, usage_line
from mercato.cli.output import (
    EXIT_OK,
    EXIT_USAGE,
    BadArgument,
    bad_argument,
    configuration_error,
    database_unreachable,
    fail,
)
from mercato.core.errors import MercatoError
from mercato.settings import SettingsError, beside_demo

# Each module adds its commands: register(top_group, admin_group).
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

PROG = "mercato"
EXIT_INTERRUPTED = 130


def build_cli() -> click.Group:
    """The `mercato` command tree: every command of DESIGN.md §10 and the demo's."""

    @click.group(
        PROG,
        cls=MercatoGroup,
        help="Mercato marketplace",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    @click.version_option(package_name="mercato", prog_name=PROG, message="%(prog)s %(version)s")
    def top() -> None:
        """Mercato marketplace."""

    @top.group("admin", cls=MercatoGroup, help="operator commands")
    @click.pass_context
    def admin(ctx: click.Context) -> None:
        # `mercato admin ...` beside the demo reads the demo's recorded settings (decision 0271).
        ctx.with_resource(beside_demo())

    for module in _MODULES:
        module.register(top, admin)
    return top


def _undecodable(argv: Sequence[str]) -> str | None:
    """An argument that is not valid UTF-8 cannot be stored or compared: refuse it up front."""
    for position, value in enumerate(argv, start=1):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {position} is not valid UTF-8 text"
    return None


def _usage_error(text: str) -> int:
    sys.stderr.write(f"error: {text}\n")
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mercato` with `argv` (default: the process's) and return its exit code."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # import-time chatter
    arguments = list(sys.argv[1:] if argv is None else argv)
    undecodable = _undecodable(arguments)
    if undecodable is not None:
        return _usage_error(undecodable)
    try:
        code = build_cli().main(arguments, prog_name=PROG, standalone_mode=False)
    except click.UsageError as exc:
        return _usage_error(usage_line(exc))
    except click.ClickException as exc:  # not a usage error: click's own exit code (1)
        sys.stderr.write(f"error: {' '.join(exc.format_message().split())}\n")
        return exc.exit_code
    except click.Abort:  # Ctrl-C: the shell's convention, 128 + SIGINT
        return EXIT_INTERRUPTED
    except BadArgument as exc:
        return bad_argument(exc)
    except (SettingsError, ValidationError) as exc:
        return configuration_error(exc)
    except OperationalError as exc:  # down, refused, wrong credentials, unopenable file
        return database_unreachable(exc)
    except MercatoError as exc:
        return fail(exc)
    return code if isinstance(code, int) else EXIT_OK
