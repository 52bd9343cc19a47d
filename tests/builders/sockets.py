"""Which process holds which TCP socket on a port, read from /proc (Linux), for tests of how
`mercato serve --workers N` listens and spreads connections."""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"
ESTABLISHED = "01"


def children(pid: int) -> set[int]:
    """The direct child processes of `pid`."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:  # a thread that ended while listing
            continue
    return found


def _inodes(pid: int) -> set[str]:
    """The inodes of the sockets `pid` holds open (none once it has exited)."""
    held: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return held
    for fd in fds:
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed while listing
            continue
        if target.startswith("socket:["):
            held.add(target[len("socket:[") : -1])
    return held


def _tcp_inodes(port: int, state: str) -> set[str]:
    """The inodes of the IPv4 TCP sockets whose local port is `port`, in `state`."""
    found: set[str] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, st, inode = fields[1], fields[3], fields[9]
        if int(local.rsplit(":", 1)[1], 16) == port and st == state and inode != "0":
            found.add(inode)
    return found


def sockets_by_process(pids: set[int], port: int, state: str) -> dict[int, int]:
    """How many TCP sockets on local `port` in `state` each of `pids` holds."""
    on_port = _tcp_inodes(port, state)
    return {pid: len(_inodes(pid) & on_port) for pid in pids}


def unowned(pids: set[int], port: int, state: str) -> int:
    """How many TCP sockets on local `port` in `state` none of `pids` holds."""
    on_port = _tcp_inodes(port, state)
    held: set[str] = set()
    for pid in pids:
        held |= _inodes(pid)
    return len(on_port - held)
