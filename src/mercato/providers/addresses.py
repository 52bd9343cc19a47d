"""What a provider address may be: public unicast only, over http(s), without userinfo, and
spelled as it will be dialled (an ASCII DNS name in IDNA A-labels, or a canonical IP literal).

Pure classification with `ipaddress` (no DNS, no I/O); `mercato.dispatch.guard` applies it to
resolved addresses at connect time, the connection service to the literal host of a base URL at
submission (an IP address in any form a resolver accepts, `localhost` and `*.localhost`).
`is_global` alone is not trusted (CPython has shipped wrong tables, CVE-2024-4032), so an
explicit deny list backs it up, and every IPv6 form that embeds an IPv4 address is refused.

HTTP libraries rewrite hosts before they dial them (yarl folds full-width digits and ideographic
full stops to ASCII, so `１２７.０.０.１` is dialled as `127.0.0.1` without any lookup), so a
host is judged as written, as yarl and httpx will dial it, and must be the same in all three
(`host_spelling_reason`, decision 0520): any other spelling is refused like a private address.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from urllib.parse import unquote, urlsplit

import httpx
import idna
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOWED_SCHEMES = frozenset({"http", "https"})
# Dotted labels of decimal, octal or hex numbers: what `inet_aton` (and so `getaddrinfo`, and a
# WHATWG URL parser) reads as an IPv4 address, e.g. `127.1`, `0x7f.1`, `2130706433`.
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}")
# One label of an ASCII DNS name (RFC 1123 LDH): letters, digits, inner hyphens, 1-63 long.
_LDH_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A label a WHATWG URL parser reads as a number (so the host "ends in a number": an IPv4 form).
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
HOST_SPELLING = "host_spelling"
"""The reason for a host that is not an ASCII DNS name or a canonical IP literal."""


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


def host_spelling_reason(host: str) -> str | None:
    """Return `host_spelling` unless `host` (a URL's host, IPv6 without brackets) is an ASCII DNS
    name in IDNA A-labels or an IP literal in the one form every parser reads alike.

    Refused: any non-ASCII character (full-width digits, ideographic full stops, U-labels), percent
    escapes, an empty label or a trailing dot, a name ending in a numeric label that is not a
    canonical dotted quad (`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`), an xn-- label that is
    no valid A-label, an IPv6 zone id and IPv4-mapped or dotted IPv6 forms. This is what the
    connect-time guard applies to the host each client is about to dial.
    """
    if not host.isascii():
        return HOST_SPELLING
    name = host.lower()
    if ":" in name:
        return _ipv6_spelling_reason(name)
    labels = name.split(".")
    if len(name) > 253 or not all(_LDH_LABEL.fullmatch(label) for label in labels):
        return HOST_SPELLING
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            canonical = str(ipaddress.IPv4Address(name)) == name
        except ValueError:
            canonical = False
        return None if canonical else HOST_SPELLING
    for label in labels:
        if label.startswith("xn--") and not _is_a_label(label):
            return HOST_SPELLING
    return None


def _ipv6_spelling_reason(name: str) -> str | None:
    if "." in name or "%" in name:  # a dotted IPv4 tail, or a zone id
        return HOST_SPELLING
    try:
        address = ipaddress.IPv6Address(name)
    except ValueError:
        return HOST_SPELLING
    return HOST_SPELLING if address.ipv4_mapped is not None else None


def _is_a_label(label: str) -> bool:
    try:
        return idna.encode(idna.decode(label)).decode("ascii") == label
    except (idna.IDNAError, UnicodeError):
        return False


def _dialled_hosts(url: str) -> list[str | None]:
    """The host as yarl (aiohttp) and as httpx will dial it (None where one refuses the URL)."""
    hosts: list[str | None] = []
    try:
        hosts.append(URL(url).raw_host)
    except (ValueError, TypeError):
        hosts.append(None)
    try:
        hosts.append(httpx.URL(url).raw_host.decode("ascii") or None)
    except (httpx.InvalidURL, UnicodeError):
        hosts.append(None)
    return hosts


def _same_host(written: str, dialled: str) -> bool:
    if ":" in written:
        try:
            return ipaddress.ip_address(written) == ipaddress.ip_address(dialled)
        except ValueError:
            return False
    return written.lower() == dialled.lower()


def _host_reason(url: str, written: str, *, allow_private: bool) -> str | None:
    """Why the host of `url` (`written` as urlsplit reads it) may not be dialled, else None."""
    dialled = _dialled_hosts(url)
    if not allow_private:
        for host in dict.fromkeys([written, *dialled]):  # each distinct spelling once
            reason = None if host is None else literal_host_reason(host)
            if reason is not None:
                return reason
    if not all(host is not None and _same_host(written, host) for host in dialled):
        return HOST_SPELLING
    return host_spelling_reason(written)


@functools.lru_cache(maxsize=4096)
def check_base_url(url: str, *, allow_private: bool) -> str | None:
    """Return why `url` cannot be a provider base URL (syntax and literal addresses), else None.

    The host is judged as written and as each HTTP client will dial it; a host spelled any way
    but as an ASCII name or canonical IP literal is refused even where private addresses are
    allowed (a canonical spelling always exists). No DNS here: names are judged when a
    connection is opened, which is what counts. A pure function of its arguments, so cached:
    the sync client runs it before every request (parsing with httpx alone costs ~35 µs).
    """
    if not url.isprintable() or any(char.isspace() for char in url):
        return "malformed"  # urlsplit drops tabs and newlines silently; no client should see them
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
    return _host_reason(url, parts.hostname, allow_private=allow_private)
