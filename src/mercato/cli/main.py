"""The `mercato` command: serve, worker, migrate, up and the operator `admin` commands.

Built on click (decision 0300): `mercato --version`, shell completion
(`eval "$(_MERCATO_COMPLETE=bash_source mercato)"`), and every usage error as one line, exit 2.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

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

# Which module adds each command (its `register(top_group, admin_group)` adds all of its own).
# A module is imported only when one of its commands is looked up: `mercato admin
# verify-ledger` does not import the web client, the conformance runner or Argon2, and a
# listing (`--help`, an invalid choice, completion) imports them all (decision 0391).
# tests/unit/cli/test_cli_surface.py checks these tables against what the modules register.
TOP_COMMANDS: dict[str, str] = {
    "migrate": "commands_core",
    "serve": "commands_core",
    "openapi": "commands_core",
    "worker": "commands_worker",
    "up": "commands_demo",
    "daily-ranking": "commands_demo",
    "sample-upstream": "commands_demo",
    "call": "commands_client",
    "catalog": "commands_client",
    "provider": "commands_provider",
}
ADMIN_COMMANDS: dict[str, str] = {
    "create-account": "commands_accounts",
    "create-api-key": "commands_accounts",
    "set-key-limit": "commands_accounts",
    "revoke-api-key": "commands_accounts",
    "unlock": "commands_accounts",
    "grant-points": "commands_ledger",
    "verify-ledger": "commands_ledger",
    "add-connection": "commands_providers",
    "update-connection": "commands_providers",
    "check-connection": "commands_providers",
    "approve-connection": "commands_providers",
    "publish": "commands_catalog",
    "hold": "commands_catalog",
    "release-hold": "commands_catalog",
    "legacy-patterns": "commands_catalog",
    "set-quota": "commands_invocations",
    "decide-dispute": "commands_cases",
    "decide-report": "commands_cases",
    "stuck-invocations": "commands_resolution",
    "resolve-invocation": "commands_resolution",
}
COMMAND_MODULES = sorted({*TOP_COMMANDS.values(), *ADMIN_COMMANDS.values()})


class _Modules:
    """Imports a command module once and lets it register its commands on both groups."""

    def __init__(self) -> None:
        self.groups: tuple[click.Group, click.Group] | None = None
        self.loaded: set[str] = set()

    def load(self, name: str) -> None:
        if name in self.loaded or self.groups is None:
            return
        self.loaded.add(name)
        importlib.import_module(f"mercato.cli.{name}").register(*self.groups)


class LazyGroup(MercatoGroup):
    """A MercatoGroup whose commands are imported when looked up (listing looks them all up)."""

    def __init__(self, *args: Any, lazy: Mapping[str, str], modules: _Modules, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy)
        self._modules = modules

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self._lazy:
            self._modules.load(self._lazy[cmd_name])
        return super().get_command(ctx, cmd_name)


PROG = "mercato"
EXIT_INTERRUPTED = 130


def build_cli() -> click.Group:
    """The `mercato` command tree: every command of DESIGN.md §10 and the demo's."""

    modules = _Modules()

    @click.group(
        PROG,
        cls=LazyGroup,
        lazy=TOP_COMMANDS,
        modules=modules,
        help="Mercato marketplace",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    @click.version_option(package_name="mercato", prog_name=PROG, message="%(prog)s %(version)s")
    def top() -> None:
        """Mercato marketplace."""

    @top.group(
        "admin", cls=LazyGroup, lazy=ADMIN_COMMANDS, modules=modules, help="operator commands"
    )
    @click.pass_context
    def admin(ctx: click.Context) -> None:
        # `mercato admin ...` beside the demo reads the demo's recorded settings (decision 0271).
        ctx.with_resource(beside_demo())

    modules.groups = (top, admin)
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
    # httpx logs every request at INFO: a person reads results and one-line errors, not those.
    logging.getLogger("httpx").setLevel(logging.WARNING)
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
