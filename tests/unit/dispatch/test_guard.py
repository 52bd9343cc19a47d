"""SSRF guard: every forbidden address class is refused, checked addresses are the ones dialled."""

from __future__ import annotations

import ipaddress
import socket
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpcore
import pytest

from builders.listeners import Listener, listener, read_request, respond
from mercato.dispatch.client import ProviderClient
from mercato.dispatch.guard import BlockedAddress, forbidden_reason, resolve_checked
from mercato.providers.addresses import check_base_url
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"

FORBIDDEN: list[tuple[str, str]] = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link_local"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.10", "reserved"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link_local"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "ipv4_mapped:loopback"),
    ("::ffff:10.0.0.1", "ipv4_mapped:private"),
    ("::ffff:8.8.8.8", "ipv4_mapped:public"),
    ("64:ff9b::7f00:1", "ipv4_embedded:loopback"),
    ("64:ff9b::a00:1", "ipv4_embedded:private"),
    ("2002:7f00:1::1", "ipv4_embedded:loopback"),
    ("2002:c0a8:101::1", "ipv4_embedded:private"),
    ("2001:db8::1", "reserved"),
]

PUBLIC = ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::200e"]


@pytest.mark.parametrize(("address", "reason"), FORBIDDEN)
def test_forbidden_classes_are_named(address: str, reason: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_unicast_is_allowed(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


def test_one_forbidden_answer_among_public_ones_refuses_the_name() -> None:
    with pytest.raises(BlockedAddress, match="loopback"):
        resolve_checked(
            "mixed.example", 80, resolver=lambda h, p: ["8.8.8.8", "127.0.0.1"], allow_private=False
        )


def test_allowing_private_addresses_switches_the_check_off() -> None:
    addresses = resolve_checked(
        "local.example", 80, resolver=lambda h, p: ["127.0.0.1"], allow_private=True
    )
    assert addresses == [ipaddress.ip_address("127.0.0.1")]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme"),
        ("gopher://example.com/", "scheme"),
        ("ftp://example.com/", "scheme"),
        ("http://public@127.0.0.1/", "userinfo"),
        ("http://user:pw@example.com/", "userinfo"),
        ("http:///nohost", "no_host"),
        ("https://example.com/?q=1", "query_or_fragment"),
        ("http://127.0.0.1:8080", "loopback"),
        ("http://[::1]:8080", "loopback"),
        ("http://169.254.169.254/latest", "link_local"),
        ("http://[::ffff:127.0.0.1]/", "ipv4_mapped:loopback"),
    ],
)
def test_base_url_syntax_and_literal_addresses(url: str, reason: str) -> None:
    assert check_base_url(url, allow_private=False) == reason


def test_public_names_pass_the_syntax_check_and_wait_for_resolution() -> None:
    assert check_base_url("https://provider.example.com/base", allow_private=False) is None


def _settings(tmp_path: Path, *, allow_private: bool) -> Settings:
    return Settings(
        env="dev",
        data_dir=tmp_path,
        allow_private_provider_addresses=allow_private,
        provider_timeout_seconds=3,
    )


def _target(url: str) -> DispatchTarget:
    return DispatchTarget(
        connection_id="pcon_x", base_url=url, credential="secret-1", approved=True
    )


@dataclass
class Sentinel:
    """A loopback listener that keeps the request heads it was sent. Its tests ask only for
    their own path: a stray probe from a parallel test that reuses the port proves nothing."""

    listener: Listener
    heads: list[bytes] = field(default_factory=list)
    path: str = field(default_factory=lambda: f"/guard-probe-{uuid.uuid4().hex}")

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def url(self) -> str:
        return self.listener.url

    def heard(self) -> int:
        """How many requests for this sentinel's own path arrived."""
        line = f"GET {self.path} ".encode()
        return sum(1 for head in list(self.heads) if head.startswith(line))


@pytest.fixture
def sentinel() -> Iterator[Sentinel]:
    heads: list[bytes] = []

    def script(conn: socket.socket, _listener: Listener) -> None:
        heads.append(read_request(conn))  # recorded before the answer is sent
        conn.sendall(OK_RESPONSE)

    with listener(script) as running:
        yield Sentinel(running, heads)


@pytest.mark.parametrize("address", [a for a, _ in FORBIDDEN])
def test_injected_resolver_answer_is_refused_and_nothing_connects(
    tmp_path: Path, sentinel: Sentinel, address: str
) -> None:
    calls: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> Sequence[str]:
        calls.append((host, port))
        return [address]

    with ProviderClient(_settings(tmp_path, allow_private=False), resolver=resolver) as client:
        answer = client.get(
            _target(f"http://provider.example:{sentinel.port}"),
            sentinel.path,
            with_credential=False,
            max_bytes=1024,
        )
    assert answer.error == "blocked_address"
    assert answer.status is None
    assert calls == [("provider.example", sentinel.port)]
    assert sentinel.heard() == 0


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "127.1", "2130706433", "0x7f.1", "0177.0.0.1", "[::ffff:127.0.0.1]"],
)
def test_real_loopback_listener_sees_no_connection_when_private_is_not_allowed(
    tmp_path: Path, sentinel: Sentinel, host: str
) -> None:
    with ProviderClient(_settings(tmp_path, allow_private=False)) as client:
        answer = client.get(
            _target(f"http://{host}:{sentinel.port}"),
            sentinel.path,
            with_credential=False,
            max_bytes=1024,
        )
    assert answer.error == "blocked_address"
    assert answer.status is None
    assert sentinel.heard() == 0


def test_the_same_listener_is_reached_when_private_addresses_are_allowed(
    tmp_path: Path, sentinel: Sentinel
) -> None:
    with ProviderClient(_settings(tmp_path, allow_private=True)) as client:
        answer = client.get(
            _target(sentinel.url), sentinel.path, with_credential=False, max_bytes=1024
        )
    assert (answer.status, answer.error) == (200, None)
    assert sentinel.heard() == 1


class _PublicHostsAreTheListener(httpcore.NetworkBackend):
    """Stand-in for the internet: a dial to any public address lands on the local listener."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dialled: list[str] = []
        self._real = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, **kwargs: Any) -> httpcore.NetworkStream:
        self.dialled.append(host)
        assert forbidden_reason(ipaddress.ip_address(host)) is None, "dialled a checked-bad IP"
        return self._real.connect_tcp("127.0.0.1", self.port, **kwargs)


def _client_with_internet(
    settings: Settings, resolver: Any, internet: _PublicHostsAreTheListener
) -> ProviderClient:
    from mercato.dispatch.transport import GuardedTransport

    transport = GuardedTransport(allow_private=False, resolver=resolver, inner=internet)
    return ProviderClient(settings, transport=transport)


def test_dns_rebinding_cannot_move_a_checked_connection(tmp_path: Path, sentinel: Sentinel) -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"], ["127.0.0.1"]])
    resolved: list[str] = []

    def rebinding(host: str, port: int) -> Sequence[str]:
        answer = next(answers)
        resolved.extend(answer)
        return answer

    internet = _PublicHostsAreTheListener(sentinel.port)
    settings = _settings(tmp_path, allow_private=False)
    with _client_with_internet(settings, rebinding, internet) as client:
        first = client.get(
            _target("http://rebind.example"), sentinel.path, with_credential=False, max_bytes=64
        )
    # One resolution per connection; the socket went to the address that was checked.
    assert (first.status, first.error) == (200, None)
    assert resolved == ["93.184.216.34"]
    assert internet.dialled == ["93.184.216.34"]
    assert sentinel.heard() == 1

    # The name now rebinds to loopback: the next connection is refused before any dial.
    with _client_with_internet(settings, rebinding, internet) as client:
        second = client.get(
            _target("http://rebind.example"), sentinel.path, with_credential=False, max_bytes=64
        )
    assert second.error == "blocked_address"
    assert internet.dialled == ["93.184.216.34"]
    assert sentinel.heard() == 1


def test_a_public_host_redirecting_to_a_private_one_is_not_followed(
    tmp_path: Path, sentinel: Sentinel
) -> None:
    redirect = (
        f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{sentinel.port}{sentinel.path}\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n"
    ).encode()
    with listener(respond(redirect)) as public_host:
        internet = _PublicHostsAreTheListener(public_host.port)
        settings = _settings(tmp_path, allow_private=False)
        with _client_with_internet(settings, lambda h, p: ["93.184.216.34"], internet) as client:
            answer = client.get(
                _target("http://public.example"), "/x", with_credential=False, max_bytes=64
            )
        assert (answer.status, answer.error) == (302, "redirect")
        assert public_host.count() == 1
    assert sentinel.heard() == 0
