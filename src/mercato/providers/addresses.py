"""What a provider address may be: public unicast only, over http(s), without userinfo.

Pure classification with `ipaddress` (no DNS, no I/O); `mercato.dispatch.guard` applies it to
resolved addresses at connect time, the connection service to the literal host of a base URL at
submission (an IP address in any form a resolver accepts, `localhost` and `*.localhost`).
`is_global` alone is not trusted (CPython has shipped wrong tables, CVE-2024-4032), so an
explicit deny list backs it up, and every IPv6 form that embeds an IPv4 address is refused.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import unquote, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOWED_SCHEMES = frozenset({"http", "https"})
# Dotted labels of decimal, octal or hex numbers: what `inet_aton` (and so `getaddrinfo`, and a
# WHATWG URL parser) reads as an IPv4 address, e.g. `127.1`, `0x7f.1`, `2130706433`.
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}")


def _nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)


_V4_DENY: tuple[tuple[str, tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]], ...] = (
    ("unspecified", _nets("0.0.0.0/8")),
    ("loopback", _nets("127.0.0.0/8")),
    ("private", _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    ("link_local", _nets("169.254.0.0/16")),
    ("cgnat", _nets("100.64.0.0/10")),
    ("multicast", _nets("224.0.0.0/4")),
    ("broadcast", _nets("255.255.255.255/32")),
    (
        "reserved",
        _nets(
            "192.0.0.0/24",  # IETF protocol assignments
            "192.0.2.0/24",  # documentation
            "192.88.99.0/24",  # 6to4 relay anycast
            "198.18.0.0/15",  # benchmarking
            "198.51.100.0/24",  # documentation
            "203.0.113.0/24",  # documentation
            "240.0.0.0/4",  # class E
        ),
    ),
)

_V6_DENY: tuple[tuple[str, tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]], ...] = (
    ("unspecified", _nets("::/128")),
    ("loopback", _nets("::1/128")),
    ("ipv4_mapped", _nets("::ffff:0:0/96")),
    ("ipv4_embedded", _nets("::/96", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32")),
    ("link_local", _nets("fe80::/10")),
    ("private", _nets("fc00::/7", "fec0::/10")),
    ("multicast", _nets("ff00::/8")),
    ("reserved", _nets("100::/64", "2001:db8::/32", "3fff::/20", "5f00::/16")),
)


def forbidden_reason(ip: IPAddress) -> str | None:
    """Return why `ip` may not be a provider destination, or None when it is public."""
    table = _V4_DENY if isinstance(ip, ipaddress.IPv4Address) else _V6_DENY
    for reason, networks in table:
        if any(ip in net for net in networks):
            if reason in ("ipv4_mapped", "ipv4_embedded"):
                return f"{reason}:{_embedded_reason(ip)}"
            return reason
    if not ip.is_global:
        return "not_global"
    return None


def _embedded_reason(ip: IPAddress) -> str:
    """Name the class of the IPv4 address an IPv6 address carries (for the evidence only)."""
    assert isinstance(ip, ipaddress.IPv6Address)
    inner = ip.ipv4_mapped or ip.sixtofour
    if inner is None:
        inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return forbidden_reason(inner) or "public"


def parse_ip(text: str) -> IPAddress:
    """Parse a resolved address (an IPv6 zone id, if any, is dropped before the check)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def _numeric_ipv4(host: str) -> IPAddress | None:
    """The IPv4 address a numeric host such as `127.1` or `0x7f000001` names, else None.

    Raises ValueError for a numeric host that is no address (`1.2.3.999`): a URL parser refuses
    it, and no name lookup should be attempted for it either.
    """
    if _NUMERIC_HOST.fullmatch(host) is None:
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        raise ValueError(host) from None


def literal_host_reason(host: str) -> str | None:
    """Return why `host`, taken literally (no DNS), is not a public destination, else None.

    `localhost` and `*.localhost` are loopback by definition (RFC 6761); an IP address counts in
    every spelling a resolver accepts; any other name is judged when it is resolved.
    """
    name = unquote(host).lower().removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        literal: IPAddress | None = parse_ip(name)
    except ValueError:
        try:
            literal = _numeric_ipv4(name)
        except ValueError:
            return "malformed"
    return None if literal is None else forbidden_reason(literal)


def check_base_url(url: str, *, allow_private: bool) -> str | None:
    """Return why `url` cannot be a provider base URL (syntax and literal addresses), else None.

    No DNS here: names are judged when a connection is opened, which is what counts.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "malformed"
    if parts.scheme not in ALLOWED_SCHEMES:
        return "scheme"
    if not parts.hostname:
        return "no_host"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "userinfo"
    if parts.query or parts.fragment:
        return "query_or_fragment"
    if port == 0:
        return "port"
    if allow_private:
        return None
    return literal_host_reason(parts.hostname)
