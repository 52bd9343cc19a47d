"""`mercato call` / `mercato catalog` edges that need no platform; the spinner's TTY rule."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from builders.servers import QuietThreadingHTTPServer, serve_in_thread, stop_server
from mercato.cli.commands_client import Spinner
from mercato.cli.main import main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_spinner_draws_on_a_terminal_and_clears_its_line() -> None:
    stream = Terminal()
    with Spinner(stream, "acme.echo v1", interval=60) as spinner:
        spinner.update("pending: waiting for settlement")
    text = stream.getvalue()
    assert "acme.echo v1: calling" in text  # the first frame is drawn at once
    assert text.endswith("\r\x1b[K")


def test_the_spinner_stays_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with Spinner(stream, "acme.echo v1", interval=0.01):
        pass
    assert stream.getvalue() == ""


def test_call_without_an_api_key_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("MERCATO_API_KEY", raising=False)
    source = tmp_path / "in.json"
    source.write_text('{"n": 1}')

    code = main(["call", "acme.echo", "v1", "--input", str(source), "--url", closed_port_url()])

    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.startswith("error: UNAUTHENTICATED") and out.err.count("\n") == 1


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", None])
def test_call_with_bad_input_is_a_usage_error(
    content: str | None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "in.json"
    if content is not None:
        source.write_text(content)

    code = main(["call", "a.b", "v1", "--input", str(source), "--api-key", "mercato_live_k"])

    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.startswith("error: INVALID_INPUT") and out.err.count("\n") == 1


def test_an_unreachable_platform_is_one_line_naming_the_key_to_resume(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "mercato_live_" + "q" * 40
    monkeypatch.setenv("MERCATO_API_KEY", secret)
    source = tmp_path / "in.json"
    source.write_text('{"n": 1}')

    code = main(
        ["call", "a.b", "v1", "--input", str(source), "--key", "k-77", "--url", closed_port_url()]
    )

    out = capsys.readouterr()
    assert code == 1 and out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith("error: NETWORK_ERROR: ") and line.endswith("Resume with --key k-77")
    assert secret not in out.err


CHART_ERROR = {"pointer": "/chart", "detail": "'weekly' is not one of ['daily', 'monthly']"}
HOSTILE_ERROR = {"pointer": "/x\x1b[2J", "detail": "cleared\x1b]0;title\x07\nsecond line"}


@pytest.fixture
def refusing_platform() -> Iterator[str]:
    """A loopback platform that refuses every invoke as the real one refuses a bad body."""
    problem = {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "code": "REQUEST_SCHEMA_VIOLATION",
        "message": "The body does not match the version's request schema.",
        "errors": [CHART_ERROR, HOSTILE_ERROR],
    }

    class Refuse(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.dumps(problem).encode()
            self.send_response(422)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = QuietThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop_server(server, thread)


def test_call_prints_each_located_error_on_its_own_line(
    refusing_platform: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 41 item 5: the pointer and detail of each error, not only the code and message;
    what the server sent cannot move the cursor or clear the terminal."""
    source = tmp_path / "in.json"
    source.write_text('{"chart": "weekly"}')

    arguments = ["call", "a.b", "v1", "--input", str(source), "--api-key", "mercato_live_k"]
    code = main([*arguments, "--url", refusing_platform])

    out = capsys.readouterr()
    assert code == 1 and out.out == ""
    assert out.err.splitlines() == [
        "error: REQUEST_SCHEMA_VIOLATION: The body does not match the version's request schema.",
        "  /chart: 'weekly' is not one of ['daily', 'monthly']",
        "  /x\ufffd[2J: cleared\ufffd]0;title\ufffd second line",
    ]
