"""SSRF guard: resolve once, refuse non-public addresses, hand back only checked addresses.

Modelled on Stripe's Smokescreen: classify every resolved address (`classifyAddr`), then dial
exactly the address that was classified, so a rebinding DNS answer between check and connect
cannot redirect the socket. The classification itself lives in `mercato.providers.addresses`;
`dialled_host_reason` is the one check both clients apply to the host they are about to dial
(httpx's in the sync transport, yarl's in the async client), before any connect.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

from mercato.providers.addresses import (
    IPAddress,
    check_base_url,
    forbidden_reason,
    host_spelling_reason,
    literal_host_reason,
    parse_ip,
)

__all__ = [
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
    "system_resolver",
]

Resolver = Callable[[str, int], Sequence[str]]


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


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve `host` to every A and AAAA address, in the system's order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


def resolve_checked(
    host: str, port: int, *, resolver: Resolver, allow_private: bool
) -> list[IPAddress]:
    """Resolve `host` once and return the addresses to connect to.

    Every address must pass (a name answering one public and one private address is refused as a
    whole: the mix is the shape of a rebinding attack). With `allow_private` nothing is refused,
    but the connection still goes only to the addresses returned here.
    """
    try:
        answers = list(resolver(host, port))
    except OSError as exc:
        raise UnresolvableHost(host) from exc
    return check_answers(host, answers, allow_private=allow_private)


def check_answers(host: str, answers: Sequence[str], *, allow_private: bool) -> list[IPAddress]:
    """Check what one resolution of `host` answered (the half of `resolve_checked` after the
    lookup, shared with the async client, whose lookup is awaited)."""
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
