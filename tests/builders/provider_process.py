"""A real echo provider process on 127.0.0.1 for the SDK's functional tests."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from builders.platform_process import free_port, is_live, wait_for
from builders.provider import CREDENTIAL

ECHO_PROVIDER = Path(__file__).parents[1] / "functional" / "provider" / "echo_provider.py"


@dataclass
class ProviderProcess:
    """One echo provider process; `start` (re)launches it on the same port and store."""

    store: str
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def counter(self) -> Path:
        return self.workdir / "runs.txt"

    def runs(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def start(self, *extra: str, env: dict[str, str] | None = None) -> None:
        args = [sys.executable, str(ECHO_PROVIDER), "--port", str(self.port)]
        args += ["--store", self.store, "--counter", str(self.counter), *extra]
        full_env = dict(os.environ)
        full_env.update({"ECHO_PROVIDER_CREDENTIAL": CREDENTIAL, **(env or {})})
        self.process = subprocess.Popen(args, env=full_env)
        self._wait_live()

    def _wait_live(self) -> None:
        process = self.process
        assert process is not None
        wait_for(lambda: is_live(self.base_url, process, "provider"), what="provider", timeout=30)

    def wait_exit(self, timeout: float = 30) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
