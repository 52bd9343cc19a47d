"""CLI output: one JSON object with --json, else plain lines; errors map to exit codes."""

from __future__ import annotations

import json
import sys
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
    sys.stderr.write(f"error: argument {error.argument}: {error.message}\n")
    return EXIT_USAGE


def fail(error: MercatoError) -> int:
    """Report a domain error on stderr and return the exit code."""
    sys.stderr.write(f"error: {error.code}: {error.message}\n")
    return EXIT_FAILURE
