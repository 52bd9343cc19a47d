"""CLI output: one JSON object with --json, else plain lines; errors map to exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from mercato.core.errors import MercatoError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def emit(data: dict[str, Any], *, as_json: bool, text: str | None = None) -> None:
    """Print `data` as one JSON object, or `text` (default: key: value lines)."""
    if as_json:
        sys.stdout.write(json.dumps(data, sort_keys=True, default=str) + "\n")
    elif text is not None:
        sys.stdout.write(text + "\n")
    else:
        for key, value in data.items():
            sys.stdout.write(f"{key}: {value}\n")
    sys.stdout.flush()


class BadArgument(Exception):
    """An operator's argument that cannot be used: exit 2 with one line naming it."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message


def bad_argument(error: BadArgument) -> int:
    """Report a bad argument as one line on stderr and return exit code 2."""
    text = " ".join(f"argument {error.argument}: {error.message}".split())  # always one line
    sys.stderr.write(f"error: {text}\n")
    return EXIT_USAGE


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type=` for a whole number from `low` to `high` (a bad one: exit 2)."""

    def parse(text: str) -> int:
        try:
            number = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {number}")
        return number

    parse.__name__ = "whole number"  # argparse's fallback message names the type
    return parse


Naming = str | Callable[[MercatoError], str]


@contextmanager
def argument_errors(arguments: Mapping[type[MercatoError], Naming]) -> Iterator[None]:
    """Turn the listed domain errors into a BadArgument naming the operator's argument.

    Example: `with argument_errors({AccountNotFound: "EMAIL"}): ...`; a callable picks the
    argument from the error when one error class covers several. The first listed class that
    matches wins; other errors pass through unchanged.
    """
    try:
        yield
    except MercatoError as error:
        for kind, naming in arguments.items():
            if isinstance(error, kind):
                argument = naming if isinstance(naming, str) else naming(error)
                raise BadArgument(argument, f"{error.message} ({error.code})") from None
        raise


def configuration_error(error: Exception) -> int:
    """Report settings that cannot be used as one line naming the variable; exit code 2."""
    from mercato.settings import describe_settings_error

    sys.stderr.write(f"configuration error: {describe_settings_error(error)}\n")
    return EXIT_USAGE


def database_unreachable(error: Exception) -> int:
    """Report a database that failed (down, refused, bad login) as one line, never the URL."""
    from mercato.core.logs import scrub

    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    reason = scrub(reason.split(" (Background on this error")[0])[:300]
    sys.stderr.write(
        f"error: the database named by MERCATO_DATABASE_URL failed ({reason}); check that it "
        "is running and that the URL and its credentials are right\n"
    )
    return EXIT_FAILURE


def fail(error: MercatoError) -> int:
    """Report a domain error on stderr and return the exit code."""
    sys.stderr.write(f"error: {error.code}: {error.message}\n")
    return EXIT_FAILURE
