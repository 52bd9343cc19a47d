"""`mercato call` and `mercato catalog`: the caller API from a terminal, via mercato.client."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from mercato.cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, emit
from mercato.client import (
    InvocationPending,
    InvocationResult,
    MercatoClient,
    MercatoClientError,
    RetryPolicy,
    TransportFailed,
)
from mercato.settings import CallerSettings

DEFAULT_URL = "http://127.0.0.1:8000"
CALL_WAIT_SECONDS = 300.0


def register(top: Any, _admin: Any) -> None:
    call = top.add_parser("call", help="invoke a service version and print its result")
    call.add_argument("service_code", metavar="SERVICE")
    call.add_argument("version", metavar="VERSION", help="an exact version, e.g. v1")
    call.add_argument("--input", required=True, metavar="FILE|-", help="JSON object; - is stdin")
    call.add_argument("--key", metavar="IDEMPOTENCY_KEY", help="resume or pin a logical call")
    call.add_argument("--out", type=Path, metavar="DIR", help="save verified artifacts here")
    _connection_arguments(call, api_key=True)
    call.set_defaults(handler=cmd_call)

    catalog = top.add_parser("catalog", help="list listings, their versions and prices")
    _connection_arguments(catalog, api_key=False)
    catalog.add_argument("--json", action="store_true")
    catalog.set_defaults(handler=cmd_catalog)


def _connection_arguments(parser: argparse.ArgumentParser, *, api_key: bool) -> None:
    parser.add_argument("--url", help=f"platform URL (env MERCATO_URL, default {DEFAULT_URL})")
    if api_key:
        parser.add_argument("--api-key", help="API key (prefer env MERCATO_API_KEY)")


def _quiet_http_logs() -> None:
    # httpx logs every request at INFO; stderr is for the spinner and one-line errors.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _url(args: argparse.Namespace) -> str:
    return str(args.url or CallerSettings().url or DEFAULT_URL)


def _error(text: str, code: int = EXIT_FAILURE) -> int:
    sys.stderr.write(f"error: {' '.join(text.split())}\n")
    return code


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
    client: MercatoClient, spinner: Spinner, args: argparse.Namespace, payload: dict[str, Any]
) -> tuple[InvocationResult, list[Path]]:
    with spinner:
        call = client.invoke(args.service_code, args.version, payload, idempotency_key=args.key)
        if args.out is None or not call.artifacts:
            return call, []
        spinner.update("downloading artifacts")
        return call, client.download_artifacts(call.invocation_id, call.artifacts, args.out)


def cmd_call(args: argparse.Namespace) -> int:
    _quiet_http_logs()
    configured = CallerSettings().api_key
    api_key = args.api_key or (configured.get_secret_value() if configured else None)
    if not api_key:
        return _error("UNAUTHENTICATED: set MERCATO_API_KEY or pass --api-key", EXIT_USAGE)
    try:
        payload = _read_input(args.input)
    except (OSError, ValueError) as exc:
        return _error(f"INVALID_INPUT: {exc}", EXIT_USAGE)
    spinner = Spinner(sys.stderr, f"{args.service_code} {args.version}")
    policy = RetryPolicy(max_wait_seconds=CALL_WAIT_SECONDS)
    try:
        with MercatoClient(_url(args), api_key, retry=policy, progress=spinner.update) as client:
            call, saved = _call(client, spinner, args, payload)
    except (TransportFailed, InvocationPending) as exc:
        key = exc.idempotency_key
        return _error(f"{exc}" + (f" Resume with --key {key}" if key else ""))
    except MercatoClientError as exc:
        return _error(str(exc))
    except OSError as exc:  # the output directory, not the platform
        return _error(f"OUTPUT_ERROR: {exc}")
    sys.stdout.write(json.dumps(call.result, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"invocation {call.invocation_id} settled\n")
    if saved:
        sys.stderr.write(f"saved {len(saved)} verified artifact(s) to {args.out}\n")
    elif call.artifacts and args.out is None:
        sys.stderr.write(f"{len(call.artifacts)} artifact(s) not saved; pass --out DIR\n")
    return EXIT_OK


def cmd_catalog(args: argparse.Namespace) -> int:
    _quiet_http_logs()
    try:
        with MercatoClient(_url(args)) as client:
            listings = list(client.iter_listings())
    except MercatoClientError as exc:
        return _error(str(exc))
    if args.json:
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
    lines = []
    for item in listings:
        lines.append(f"{item.service_code}  {item.display_name}")
        lines += [f"  {v.version}  {v.price} points" for v in item.versions]
    emit({}, as_json=False, text="\n".join(lines) if lines else "no public listings")
    return EXIT_OK
