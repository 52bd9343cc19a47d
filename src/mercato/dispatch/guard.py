"""The SSRF guard both provider transports apply: judge the host as dialled, resolve it once,
refuse non-public addresses, and hand back only the checked addresses to dial.

Modelled on Stripe's Smokescreen: classify every resolved address (`classifyAddr`), then dial
exactly the address that was classified, so a rebinding DNS answer between check and connect
cannot redirect the socket. The classification itself lives in `mercato.providers.addresses`.
Two moments, the same for both transports (`mercato.dispatch.calls`):

- before a request, `check_base_url` (the base URL's text) and `dialled_host_reason` on the host
  the transport's HTTP library will dial (httpx's reading of the URL for the blocking transport,
  yarl's for aiohttp), so a spelling a library folds to an address (full-width digits, `。`) is
  refused, never dialled; a library dials an IP-literal host without asking any resolver, so a
  literal is judged here;
- at each new connection, `resolve_checked` / `resolve_checked_async`: the dialled host again,
  one lookup, every answer checked.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from mercato.providers.addresses import (
    IPAddress,
    check_base_url,
    forbidden_reason,
    host_spelling_reason,
    literal_host_reason,
    parse_ip,
)

__all__ = [
    "AsyncResolver",
    "BlockedAddress",
    "Resolver",
    "UnresolvableHost",
    "check_answers",
    "check_base_url",
    "dialled_host_reason",
    "forbidden_reason",
    "host_spelling_reason",
    "literal_host_reason",
    "resolve_checked",
    "resolve_checked_async",
    "system_lookup",
    "system_resolver",
]

Resolver = Callable[[str, int], Sequence[str]]
"""A blocking name lookup: every A and AAAA address of (host, port), in order."""
AsyncResolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""An awaited name lookup, the same answers."""


class BlockedAddress(Exception):
    """The destination is not a public address (or not an allowed URL); nothing was sent."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class UnresolvableHost(Exception):
    """The name did not resolve (a connect failure, not a policy refusal)."""


def dialled_host_reason(host: str, *, allow_private: bool) -> str | None:
    """Why a client may not dial `host` (the host after its HTTP library's normalisation), else
    None: not an ASCII name or canonical IP literal, or (unless private addresses are allowed) a
    non-public address named literally. Names still go through `resolve_checked`."""
    reason = host_spelling_reason(host)
    if reason is None and not allow_private:
        reason = literal_host_reason(host)
    return reason


def _distinct(infos: Iterable[tuple[Any, ...]]) -> list[str]:
    """The addresses of `getaddrinfo` answers, in the system's order, without repeats."""
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve `host` to every A and AAAA address, in the system's order, without repeats."""
    return _distinct(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


async def system_lookup(host: str, port: int) -> list[str]:
    """`system_resolver` on the event loop (its `getaddrinfo` runs in a worker thread)."""
    loop = asyncio.get_running_loop()
    return _distinct(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def resolve_checked(
    host: str, port: int, *, resolver: Resolver, allow_private: bool
) -> list[IPAddress]:
    """Judge `host` as dialled, resolve it once and return the addresses to connect to.

    Every address must pass (a name answering one public and one private address is refused as a
    whole: the mix is the shape of a rebinding attack). With `allow_private` nothing is refused,
    but the connection still goes only to the addresses returned here.
    """
    _refuse_dialled(host, allow_private=allow_private)
    try:
        answers = list(resolver(host, port))
    except OSError as exc:
        raise UnresolvableHost(host) from exc
    return check_answers(host, answers, allow_private=allow_private)


async def resolve_checked_async(
    host: str, port: int, *, resolver: AsyncResolver | Resolver, allow_private: bool
) -> list[IPAddress]:
    """`resolve_checked` with a lookup that may be awaited (or plain: a test's answers)."""
    _refuse_dialled(host, allow_private=allow_private)
    try:
        found = resolver(host, port)
        answers = list(await found if isinstance(found, Awaitable) else found)
    except OSError as exc:
        raise UnresolvableHost(host) from exc
    return check_answers(host, answers, allow_private=allow_private)


def _refuse_dialled(host: str, *, allow_private: bool) -> None:
    reason = dialled_host_reason(host, allow_private=allow_private)
    if reason is not None:  # no lookup, no socket
        raise BlockedAddress(reason)


def check_answers(host: str, answers: Sequence[str], *, allow_private: bool) -> list[IPAddress]:
    """Check what one resolution of `host` answered (the half of `resolve_checked` after the
    lookup)."""
    if not answers:
        raise UnresolvableHost(host)
    try:
        addresses = [parse_ip(answer) for answer in answers]
    except ValueError as exc:
        raise BlockedAddress("unparseable_address") from exc
    if not allow_private:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason is not None:
                raise BlockedAddress(reason)
    return addresses
