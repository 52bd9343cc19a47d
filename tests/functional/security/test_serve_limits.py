"""A real `mercato serve`: oversized request heads and slow clients do not stop it serving."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from builders.platform_process import Serve, mercato, platform_env

pytestmark = pytest.mark.functional


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    env = platform_env(f"sqlite:///{tmp_path / 'mercato.db'}", tmp_path / "data")
    migrated = mercato("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    server = Serve(env, tmp_path / "serve.log")
    yield server
    server.stop()


def _status_line(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


def test_huge_headers_are_refused_and_serving_goes_on(serve: Serve) -> None:
    with socket.create_connection(("127.0.0.1", serve.port)) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
        sock.sendall(b"X-Big: " + b"a" * (256 * 1024) + b"\r\n\r\n")
        line = _status_line(sock)
    assert line.split(b" ")[1] == b"431", line  # decision 0380
    assert httpx.get(serve.url + "/health/live", timeout=5).status_code == 200


def test_a_slow_client_does_not_block_others(serve: Serve) -> None:
    slow = socket.create_connection(("127.0.0.1", serve.port))
    try:
        head = b"POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
        for i in range(40):  # bounded: one byte at a time, a normal request between bytes
            slow.sendall(head[i : i + 1])
            if i % 10 == 0:
                answer = httpx.get(serve.url + "/health/live", timeout=5)
                assert answer.status_code == 200
        with httpx.Client(timeout=5) as other:  # the slow request is still unfinished
            for _ in range(5):
                assert other.get(serve.url + "/v1/catalog/listings").status_code == 200
    finally:
        slow.close()
    assert httpx.get(serve.url + "/health/live", timeout=5).status_code == 200
