"""`mercato up` as a real process for functional tests: output lines, stop, pids gone."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

UP_TIMEOUT = 240.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


class UpProcess:
    """One `mercato up` process; `stdout_lines` yields what it printed on stdout, line by line."""

    def __init__(self, args: list[str], env: dict[str, str], stderr_log: Path) -> None:
        self._stderr = stderr_log.open("ab")
        self.stderr_log = stderr_log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mercato", "up", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        assert self.process.stdout is not None
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(self.process.stdout, self._lines), daemon=True).start()

    def next_line(self, timeout: float = UP_TIMEOUT) -> str:
        """The next stdout line, within a bounded deadline (fails if `up` exits first)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no output from mercato up in {timeout}s:\n{self.log()}"
            ) from None
        if line is None:
            raise AssertionError(f"mercato up exited ({self.process.wait()}):\n{self.log()}")
        return line

    def ready_json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.next_line())
        return data

    def log(self) -> str:
        return self.stderr_log.read_text(encoding="utf-8", errors="replace")[-4000:]

    def stop(self, signum: int = signal.SIGINT, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        finally:
            self._stderr.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        if not self._stderr.closed:
            self._stderr.close()


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone for every practical purpose except the process table.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive after a bounded wait (empty when all are gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if not pid_gone(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)
