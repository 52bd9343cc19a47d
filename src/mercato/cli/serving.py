"""`mercato serve --workers N`: uvicorn's supervisor, each worker on a listening socket of its own.

uvicorn's own `--workers` shares one listening socket among its workers, and asyncio accepts up
to its backlog of waiting connections each time a worker's loop wakes, so a client that opens
its keep-alive connections together lands them on whichever worker woke first (the benchmark's
64 split 64/0 to 42/22 between two workers) and the other worker idles. Here each worker binds
its own socket to the port with `SO_REUSEPORT`, and the kernel spreads new connections among
the listening workers by their addresses' hash (decision 0465). Supervision (health checks, a
dead worker replaced, signals) stays uvicorn's `Multiprocess`.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess

logger = logging.getLogger("uvicorn.error")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def reserve_port(host: str, port: int) -> socket.socket:
    """The port the workers will share, held by a bound socket that never listens.

    First bound as uvicorn binds (`SO_REUSEADDR` only), which fails while anything else is bound
    to the port (another `mercato serve` included, though its sockets allow `SO_REUSEPORT`), and
    resolves port 0; then held with `SO_REUSEPORT`, so the workers can join it and nothing else
    takes the port while a dead worker is replaced. A socket that does not listen is never
    handed a connection. Exits as uvicorn does (logged, `STARTUP_FAILURE`) when the port is
    taken."""
    family = _family(host)
    try:
        with socket.socket(family, socket.SOCK_STREAM) as check:
            check.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            check.bind((host, port))
            port = check.getsockname()[1]
        held = _reuseport_socket(host, port)
    except OSError as exc:
        logger.error(exc)
        sys.exit(STARTUP_FAILURE)
    logger.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", host, port)
    return held


def _reuseport_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class OwnSocketWorkers(Multiprocess):
    """uvicorn's `Multiprocess`, handing each worker it starts (a replacement included) a new
    socket bound to the reserved port; the worker listens on it once its app has started, and
    the supervisor's copy is dropped once the worker has it."""

    def __init__(self, config: Config, reserved: socket.socket) -> None:
        self._host, self._port = config.host, reserved.getsockname()[1]
        self._reserved = reserved
        super().__init__(config, sockets=[])

    @property
    def sockets(self) -> list[socket.socket]:
        """Read by `Multiprocess` once for each worker it starts."""
        return [_reuseport_socket(self._host, self._port)]

    @sockets.setter
    def sockets(self, _ignored: Any) -> None:
        """`Multiprocess.__init__` assigns the shared sockets; there are none."""


def run_workers(app: str, workers: int, **options: Any) -> None:
    """Run `app` (an import string; a factory with `factory=True`) in `workers` processes, as
    `uvicorn.run(app, workers=workers, **options)` would, each on its own listening socket."""
    config = Config(app, workers=workers, **options)
    reserved = reserve_port(config.host, config.port)
    try:
        OwnSocketWorkers(config, reserved).run()
    except KeyboardInterrupt:
        pass
    finally:
        reserved.close()
