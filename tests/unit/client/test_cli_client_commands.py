"""`mercato call` / `mercato catalog` edges that need no platform; the spinner's TTY rule."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

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
