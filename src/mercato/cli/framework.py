"""The click pieces every `mercato` command is built from (decision 0300).

Usage errors keep the wording the argparse CLI had (scripts and tests read it): one line,
`error: argument NAME: reason`, `error: the following arguments are required: A, B`,
`error: argument COMMAND: invalid choice: 'x'`, exit 2. `usage_line` turns any click usage
error into that line; `main` prints it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click
from click.parser import _OptionParser, _ParsingState

F = TypeVar("F", bound=Callable[..., Any])

# `grant-points EMAIL -1`: a negative number is a value, never an option (argparse's rule).
_NEGATIVE_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")


class _Parser(_OptionParser):
    """click's parser, but `-1` or `-0.5` where an argument is expected is that argument."""

    def _process_opts(self, arg: str, state: _ParsingState) -> None:
        if _NEGATIVE_NUMBER.match(arg) and arg not in self._short_opt:
            state.largs.append(arg)
            return
        super()._process_opts(arg, state)


def _hint(param: click.Parameter) -> str:
    """How an error names a parameter: its option (`--limit`) or its metavar (`EMAIL`)."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.metavar or (param.name or "").upper()


def _given(value: object) -> bool:
    return isinstance(value, str | tuple | list | bool | int)


def whole_short_help(command: click.Command) -> str:
    """The command's one-line description in full: click would cut it at 45 characters."""
    text = command.short_help or (command.help or "").split("\n\n")[0]
    return " ".join(text.split())


class MercatoCommand(click.Command):
    """A command whose missing and surplus arguments are reported the argparse way."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = dict(kwargs.get("context_settings") or {})
        settings.setdefault("allow_extra_args", True)  # reported below, in argparse words
        kwargs["context_settings"] = settings
        super().__init__(*args, **kwargs)

    def make_parser(self, ctx: click.Context) -> _OptionParser:
        parser = _Parser(ctx)
        for param in self.get_params(ctx):
            param.add_to_parser(parser, ctx)
        return parser

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        original = list(args)  # click's parser consumes the list it is given
        try:
            rest = super().parse_args(ctx, args)
        except click.MissingParameter:
            missing = ", ".join(self._missing(ctx, original))
            raise click.UsageError(
                f"the following arguments are required: {missing}", ctx
            ) from None
        if rest and not ctx.resilient_parsing:
            raise click.UsageError(f"unrecognized arguments: {' '.join(rest)}", ctx)
        return rest

    def _missing(self, ctx: click.Context, argv: Sequence[str]) -> list[str]:
        """Every required parameter absent from `argv`, not only the first one click met."""
        opts, _, _ = self.make_parser(ctx).parse_args(args=list(argv))
        return [
            _hint(param)
            for param in self.get_params(ctx)
            if param.required and not _given(opts.get(param.name or ""))
        ]


class MercatoGroup(click.Group):
    """A group whose commands are MercatoCommands and whose bad or missing COMMAND is one line."""

    command_class = MercatoCommand

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Invoked without a command, the callback below reports the missing COMMAND itself.
        kwargs["invoke_without_command"] = True
        super().__init__(*args, **kwargs)
        self._own_callback = self.callback
        self.callback = self._require_command

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*click.Command.collect_usage_pieces(self, ctx), "COMMAND [ARGS]..."]

    def _require_command(self, *args: Any, **kwargs: Any) -> Any:
        if click.get_current_context().invoked_subcommand is None:
            raise click.UsageError("the following arguments are required: COMMAND")
        return self._own_callback(*args, **kwargs) if self._own_callback else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            if name.startswith("-"):
                raise click.NoSuchOption(name, ctx=ctx)
            choices = ", ".join(repr(choice) for choice in self.list_commands(ctx))
            raise click.UsageError(
                f"argument COMMAND: invalid choice: {name!r} (choose from {choices})", ctx
            )
        return super().resolve_command(ctx, args)


MercatoGroup.group_class = MercatoGroup


def usage_line(error: click.UsageError) -> str:
    """The one line (without `error: `) that reports a usage error, naming the argument."""
    if isinstance(error, click.BadParameter) and error.param is not None:
        text = f"argument {_hint(error.param)}: {error.message}"
    elif isinstance(error, click.NoSuchOption):
        text = f"unrecognized arguments: {error.option_name}"
    elif isinstance(error, click.BadOptionUsage):
        text = f"argument {error.option_name}: {error.message}"
    else:
        text = error.message
    return " ".join(text.split())


class WholeNumber(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.3 on
    """A whole number from `low` to `high`; anything else is a usage error naming the option."""

    name = "whole number"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{str(value)[:40]!r} is not a whole number", param, ctx)
        if not self.low <= number <= self.high:
            self.fail(f"must be from {self.low} to {self.high}, not {number}", param, ctx)
        return number


def command(name: str, **attrs: Any) -> Callable[[Callable[..., int]], MercatoCommand]:
    """`@command("create-account", help=...)`: a MercatoCommand whose callback returns the
    exit code."""
    return click.command(name, cls=MercatoCommand, **attrs)


PORT = WholeNumber(1, 65535)

JSON_HELP = "print one JSON object on stdout"


def json_option(help: str = JSON_HELP) -> Callable[[F], F]:
    """The one `--json` of every command: the handler receives it as `as_json`."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def one_of(flags: Mapping[str, Any], given: Mapping[str, bool]) -> Any:
    """The value of the one flag given out of `flags` (`--approve|--deny`); else a usage error."""
    chosen = [flag for flag in flags if given[flag]]
    if not chosen:
        raise click.UsageError(f"one of the arguments {' '.join(flags)} is required")
    if len(chosen) > 1:
        raise click.UsageError(f"argument {chosen[1]}: not allowed with argument {chosen[0]}")
    return flags[chosen[0]]
