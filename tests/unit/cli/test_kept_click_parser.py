"""The one reach into click's private parser that is kept (decision 0575): `-1` where an
argument is expected is that argument. These fail when click changes what the hook relies on."""

from __future__ import annotations

import inspect

import click
from click.parser import _OptionParser, _ParsingState
from click.testing import CliRunner

from mercato.cli.framework import MercatoCommand


def test_clicks_private_parser_still_has_what_the_hook_overrides() -> None:
    assert list(inspect.signature(_OptionParser._process_opts).parameters) == [
        "self",
        "arg",
        "state",
    ]
    parser = _OptionParser()
    parser.add_option(click.Option(["-n"]), ["-n"], "n")
    assert "-n" in parser._short_opt
    assert _ParsingState([]).largs == []


def test_a_negative_number_is_an_argument_and_a_short_option_still_an_option() -> None:
    @click.command(cls=MercatoCommand)
    @click.argument("amount")
    @click.option("-n", "note", default="")
    def command(amount: str, note: str) -> None:
        click.echo(f"{amount}|{note}")

    runner = CliRunner()
    assert runner.invoke(command, ["-1"]).output == "-1|\n"
    assert runner.invoke(command, ["-0.5", "-n", "x"]).output == "-0.5|x\n"
    assert runner.invoke(command, ["-n", "x", "-7"]).output == "-7|x\n"
