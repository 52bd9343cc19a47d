"""`mercato up`'s small pieces: the printed curl survives bash, ports never collide."""

from __future__ import annotations

import shlex
import socket
import subprocess

from mercato.cli.demo_up import SERVICE_CODE, VERSION, curl_command, pick_port


def _argv_as_bash_sees_it(command: str) -> list[str]:
    """Replace `curl` with printf so bash prints each argument it would pass on its own line."""
    script = "printf '%s\\n' " + command.removeprefix("curl ")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_the_printed_curl_expands_to_a_fresh_key_and_the_exact_request_in_bash() -> None:
    key = "mercato_live_AbC123"
    command = curl_command("http://127.0.0.1:8000", key)

    argv = _argv_as_bash_sees_it(command)

    endpoint = f"http://127.0.0.1:8000/v1/services/{SERVICE_CODE}/versions/{VERSION}:invoke"
    assert argv[:4] == ["-sS", "-X", "POST", endpoint]
    assert f"Authorization: Bearer {key}" in argv
    idempotency = [a for a in argv if a.startswith("Idempotency-Key: demo-")]
    assert len(idempotency) == 1 and "$" not in idempotency[0]
    assert argv[-2:] == ["-d", '{"chart": "manga", "limit": 5}']
    assert "\n" not in command


def test_a_key_with_shell_characters_is_quoted() -> None:
    command = curl_command("http://127.0.0.1:1", "k'ey$x")
    assert "Authorization: Bearer k'ey$x" in _argv_as_bash_sees_it(command)
    assert shlex.split(command)[0] == "curl"


def test_pick_port_prefers_a_free_port_and_falls_back_when_busy_or_taken() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        busy_port = busy.getsockname()[1]
        taken: set[int] = set()
        fallback = pick_port(busy_port, taken)
        assert fallback != busy_port
        assert pick_port(fallback, set()) == fallback  # pick_port holds nothing open
        assert pick_port(fallback, taken) != fallback  # already handed out in this run
