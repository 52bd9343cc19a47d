"""CLI output: one JSON object with --json, else plain lines or a table; errors map to exit
codes; progress bars on stderr only for a person at a terminal (decision 0301)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

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


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, empty: str) -> None:
    """Print `rows` as a table under `columns` (human output; `--json` never comes here).

    On a terminal the table fits its width; piped, it is as wide as its content, so no cell
    is wrapped or cut and a line stays one row.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = list(rows)
    if not rows:
        emit({}, as_json=False, text=empty)
        return
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*(str(cell) for cell in row))
    terminal = sys.stdout.isatty()
    Console(file=sys.stdout, width=None if terminal else 10_000, soft_wrap=False).print(grid)
    sys.stdout.flush()


T = TypeVar("T")


def shows_progress(*, as_json: bool = False) -> bool:
    """Progress is drawn only for a person: stderr is a terminal and the output is not JSON."""
    return not as_json and sys.stderr.isatty()


def progress(items: Sequence[T], label: Callable[[T], str], *, shown: bool) -> Iterator[T]:
    """Yield `items`, drawing a progress bar on stderr meanwhile when `shown` (else silent)."""
    if not shown:
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task("", total=len(items))
        for item in items:
            bar.update(task, description=label(item))
            yield item
            bar.advance(task)
