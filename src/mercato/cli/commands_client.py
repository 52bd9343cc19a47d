"""`mercato call` and `mercato catalog`: the caller API from a terminal, via mercato.client."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import click

from mercato.cli.framework import command, json_option
from mercato.cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, emit, table
from mercato.client import (
    InvocationPending,
    InvocationResult,
    MercatoAPIError,
    MercatoClient,
    MercatoClientError,
    RetryPolicy,
    TransportFailed,
)
from mercato.settings import CallerSettings

DEFAULT_URL = "http://127.0.0.1:8000"
CALL_WAIT_SECONDS = 300.0


def register(top: click.Group, _admin: click.Group) -> None:
    top.add_command(cmd_call)
    top.add_command(cmd_catalog)


_URL_HELP = f"platform URL (env MERCATO_URL, default {DEFAULT_URL})"


def _url(given: str | None) -> str:
    return str(given or CallerSettings().url or DEFAULT_URL)


def _one_line(text: str) -> str:
    """`text` on one line, with no character that could steer the terminal."""
    return "".join(c if c.isprintable() else "\ufffd" for c in " ".join(text.split()))


def _error(text: str, code: int = EXIT_FAILURE, *, located: list[str] | None = None) -> int:
    """One line `error: ...`, then one indented line per located error (pointer: detail)."""
    lines = [f"error: {_one_line(text)}", *(f"  {_one_line(line)}" for line in located or [])]
    sys.stderr.write("\n".join(lines) + "\n")
    return code


def _client_error(exc: MercatoClientError) -> int:
    located = exc.error_lines() if isinstance(exc, MercatoAPIError) else []
    return _error(f"{exc.code}: {exc.message}", located=located)


def _read_input(source: str) -> dict[str, Any]:
    raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    payload = json.loads(raw)
    if not isinstance(payload, dict):
        raise ValueError("the input must be a JSON object")
    return payload


class Spinner:
    """A one-line spinner on `stream` while a call is pending, only when it is a terminal."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO, label: str, *, interval: float = 0.1) -> None:
        self.stream = stream
        self.label = label
        self.status = "calling"
        self.enabled = stream.isatty()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._frames = itertools.cycle(self.FRAMES)

    def update(self, status: str) -> None:
        self.status = status

    def _draw(self) -> None:
        self.stream.write(f"\r\x1b[K{next(self._frames)} {self.label}: {self.status}")
        self.stream.flush()

    def _spin(self) -> None:
        while not self._stop.wait(self._interval):
            self._draw()

    def __enter__(self) -> Spinner:
        if self.enabled:
            self._draw()
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _call(
    client: MercatoClient, spinner: Spinner, request: _Request, payload: dict[str, Any]
) -> tuple[InvocationResult, list[Path]]:
    with spinner:
        call = client.invoke(
            request.service_code, request.version, payload, idempotency_key=request.key
        )
        if request.out is None or not call.artifacts:
            return call, []
        spinner.update("downloading artifacts")
        return call, client.download_artifacts(call.invocation_id, call.artifacts, request.out)


@dataclass(frozen=True)
class _Request:
    service_code: str
    version: str
    key: str | None
    out: Path | None


@command("call", help="invoke a service version and print its result")
@click.argument("service_code", metavar="SERVICE")
@click.argument("version", metavar="VERSION")
@click.option("--input", "source", required=True, metavar="FILE|-", help="JSON object; - is stdin")
@click.option("--key", metavar="IDEMPOTENCY_KEY", help="resume or pin a logical call")
@click.option(
    "--out", type=click.Path(path_type=Path), metavar="DIR", help="save verified artifacts here"
)
@click.option("--url", help=_URL_HELP)
@click.option("--api-key", help="API key (prefer env MERCATO_API_KEY)")
def cmd_call(
    service_code: str,
    version: str,
    source: str,
    key: str | None,
    out: Path | None,
    url: str | None,
    api_key: str | None,
) -> int:
    """Invoke SERVICE VERSION (an exact version, e.g. v1) and print its result."""
    configured = CallerSettings().api_key
    api_key = api_key or (configured.get_secret_value() if configured else None)
    if not api_key:
        return _error("UNAUTHENTICATED: set MERCATO_API_KEY or pass --api-key", EXIT_USAGE)
    try:
        payload = _read_input(source)
    except (OSError, ValueError) as exc:
        return _error(f"INVALID_INPUT: {exc}", EXIT_USAGE)
    spinner = Spinner(sys.stderr, f"{service_code} {version}")
    request = _Request(service_code, version, key, out)
    policy = RetryPolicy(max_wait_seconds=CALL_WAIT_SECONDS)
    try:
        with MercatoClient(_url(url), api_key, retry=policy, progress=spinner.update) as client:
            call, saved = _call(client, spinner, request, payload)
    except (TransportFailed, InvocationPending) as exc:
        resume = exc.idempotency_key
        return _error(f"{exc}" + (f" Resume with --key {resume}" if resume else ""))
    except MercatoClientError as exc:
        return _client_error(exc)
    except OSError as exc:  # the output directory, not the platform
        return _error(f"OUTPUT_ERROR: {exc}")
    sys.stdout.write(json.dumps(call.result, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"invocation {call.invocation_id} settled\n")
    if saved:
        sys.stderr.write(f"saved {len(saved)} verified artifact(s) to {out}\n")
    elif call.artifacts and out is None:
        sys.stderr.write(f"{len(call.artifacts)} artifact(s) not saved; pass --out DIR\n")
    return EXIT_OK


@command("catalog", help="list listings, their versions and prices")
@click.option("--url", help=_URL_HELP)
@json_option()
def cmd_catalog(url: str | None, as_json: bool) -> int:
    try:
        with MercatoClient(_url(url)) as client:
            listings = list(client.iter_listings())
    except MercatoClientError as exc:
        return _client_error(exc)
    if as_json:
        items = [
            {
                "serviceCode": item.service_code,
                "displayName": item.display_name,
                "versions": [{"version": v.version, "price": v.price} for v in item.versions],
            }
            for item in listings
        ]
        emit({"items": items}, as_json=True)
        return EXIT_OK
    table(
        ("SERVICE", "NAME", "VERSION", "PRICE"),
        (
            (item.service_code, item.display_name, v.version, f"{v.price} points")
            for item in listings
            for v in item.versions
        ),
        empty="no public listings",
    )
    return EXIT_OK
