"""A base URL's host taken literally: which spellings name a non-public address (issue 19 item 12).

No DNS here. The submission check and the connect-time guard share this one classification
(`mercato.dispatch.guard` re-exports it); names are judged again after resolution.
"""

from __future__ import annotations

import pytest

from mercato.dispatch import guard
from mercato.providers.addresses import check_base_url, literal_host_reason


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("localhost", "loopback"),
        ("LOCALHOST", "loopback"),
        ("localhost.", "loopback"),
        ("api.localhost", "loopback"),
        ("a.b.localhost.", "loopback"),
        ("127.0.0.1", "loopback"),
        ("127.1", "loopback"),  # short form, as inet_aton and URL parsers read it
        ("2130706433", "loopback"),  # one 32-bit decimal number
        ("0x7f000001", "loopback"),
        ("0x7f.1", "loopback"),
        ("0177.0.0.1", "loopback"),  # octal
        ("127.0.0.1.", "loopback"),
        ("%31%32%37.0.0.1", "loopback"),  # percent-encoded, decoded as a URL parser does
        ("10.1.2.3", "private"),
        ("012.1", "private"),
        ("192.168.0.10", "private"),
        ("169.254.169.254", "link_local"),  # the cloud metadata address
        ("2852039166", "link_local"),  # the same, as one number
        ("100.64.0.1", "cgnat"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("0", "unspecified"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link_local"),
        ("fe80::1%25eth0", "link_local"),
        ("fd00:ec2::254", "private"),  # the IPv6 metadata address
        ("::ffff:127.0.0.1", "ipv4_mapped:loopback"),
        ("::ffff:169.254.169.254", "ipv4_mapped:link_local"),
        ("ff02::1", "multicast"),
        ("1.2.3.999", "malformed"),  # numeric, but no address: no lookup should be tried
        ("0x1.0x2.0x3.0x4.5", None),  # five labels: not numeric, left to resolution
    ],
)
def test_literal_hosts_are_classified(host: str, reason: str | None) -> None:
    assert literal_host_reason(host) == reason


@pytest.mark.parametrize(
    "host",
    ["provider.example.com", "localhost.example.com", "mylocalhost", "8.8.8.8", "134744072",
     "2001:4860:4860::8888", "example.123x"],
)  # fmt: skip
def test_public_literals_and_other_names_pass(host: str) -> None:
    assert literal_host_reason(host) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://localhost:8080", "loopback"),
        ("https://svc.localhost/base", "loopback"),
        ("http://127.1:9000", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link_local"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://1.2.3.999/", "malformed"),
    ],
)
def test_base_urls_naming_such_hosts_are_refused_unless_private_addresses_are_allowed(
    url: str, reason: str
) -> None:
    assert check_base_url(url, allow_private=False) == reason
    assert check_base_url(url, allow_private=True) is None


def test_the_guard_exposes_the_same_rule() -> None:
    assert guard.literal_host_reason is literal_host_reason
    assert guard.check_base_url is check_base_url
