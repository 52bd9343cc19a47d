"""`mercato serve --workers N` (decision 0465): each worker listens on a socket of its own, so
the kernel spreads a client's keep-alive connections among the workers; another serve cannot
take the port; a worker that dies is replaced on a socket of its own, and no listening socket
is left that nobody accepts from."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from builders.platform_process import ManagedProcess, free_port, platform_env, wait_for
from builders.sockets import ESTABLISHED, LISTEN, children, sockets_by_process, unowned

# How a process listens does not depend on the store.
pytestmark = [pytest.mark.functional, pytest.mark.sqlite_only]

CONNECTIONS = 32  # all on one worker by chance: 1 in 2**31


def _serve(db_url: str, tmp_path: Path, port: int) -> ManagedProcess:
    return ManagedProcess(
        [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", "2"],
        tmp_path / "serve.log",
        platform_env(db_url, tmp_path / "data"),
    )


def _listening_workers(serve: ManagedProcess, port: int) -> set[int] | None:
    """The supervisor's two children that each hold one listening socket on `port`."""
    if serve.process.poll() is not None:
        raise RuntimeError(f"serve exited with {serve.process.returncode}")
    counts = sockets_by_process(children(serve.process.pid), port, LISTEN)
    listening = {pid for pid, held in counts.items() if held == 1}
    return listening if len(listening) == 2 else None


def _started(serve: ManagedProcess, port: int) -> set[int]:
    workers: set[int] = wait_for(
        lambda: _listening_workers(serve, port), what="two workers listening"
    )
    return workers


def _assert_one_socket_per_worker(serve: ManagedProcess, workers: set[int], port: int) -> None:
    supervisor = serve.process.pid
    # The supervisor accepts nothing: every listening socket on the port is one worker's own.
    assert sockets_by_process({supervisor}, port, LISTEN) == {supervisor: 0}
    assert unowned(workers, port, LISTEN) == 0


def _answered(conn: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(65536)
        assert chunk, "the connection closed before answering"
        head += chunk
    return head


def test_each_worker_listens_on_its_own_socket_and_takes_connections(
    db_url: str, tmp_path: Path
) -> None:
    port = free_port()
    serve = _serve(db_url, tmp_path, port)
    try:
        workers = _started(serve, port)
        _assert_one_socket_per_worker(serve, workers, port)
        conns = [
            socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(CONNECTIONS)
        ]
        try:
            for conn in conns:
                conn.sendall(b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n")
            heads = [_answered(conn) for conn in conns]
            held = sockets_by_process(workers, port, ESTABLISHED)
        finally:
            for conn in conns:
                conn.close()
    finally:
        serve.stop()

    assert all(head.startswith(b"HTTP/1.1 200") for head in heads)
    # Every keep-alive connection is held by a worker, and both workers hold some.
    assert sum(held.values()) == CONNECTIONS
    assert all(count > 0 for count in held.values()), held


def test_a_second_serve_cannot_take_the_port(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    serve = _serve(db_url, tmp_path, port)
    try:
        workers = _started(serve, port)
        second = subprocess.run(
            [sys.executable, "-m", "mercato", "serve", "--port", str(port), "--workers", "2"],
            env=platform_env(db_url, tmp_path / "second"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        still = _listening_workers(serve, port)
    finally:
        serve.stop()

    assert second.returncode == 3  # uvicorn's start-up failure, as for a single process
    assert "Address already in use" in second.stderr
    assert still == workers


def test_a_dead_worker_is_replaced_on_a_socket_of_its_own(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    serve = _serve(db_url, tmp_path, port)
    try:
        workers = _started(serve, port)
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        replaced: set[int] = wait_for(
            lambda: (now := _listening_workers(serve, port)) and victim not in now and now,
            what="the killed worker replaced",
        )
        _assert_one_socket_per_worker(serve, replaced, port)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n")
            head = _answered(conn)
    finally:
        serve.stop()

    assert replaced - workers and workers - replaced == {victim}
    assert head.startswith(b"HTTP/1.1 200")
