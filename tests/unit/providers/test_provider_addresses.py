"""A base URL's host taken literally: which spellings name a non-public address (issue 19 item 12).

No DNS here. The submission check and the connect-time guard share this one classification
(`mercato.dispatch.guard` re-exports it); names are judged again after resolution.
"""

from __future__ import annotations

import pytest

from mercato.dispatch import guard
from mercato.providers.addresses import check_base_url, host_spelling_reason, literal_host_reason


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
        ("http://127.0.0.1:9000", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link_local"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://[::1]:8080", "loopback"),
    ],
)
def test_base_urls_naming_such_hosts_are_refused_unless_private_addresses_are_allowed(
    url: str, reason: str
) -> None:
    assert check_base_url(url, allow_private=False) == reason
    assert check_base_url(url, allow_private=True) is None


@pytest.mark.parametrize(
    ("url", "strict_reason"),
    [
        ("http://127.1:9000", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://127.0.0.1./", "loopback"),
        ("http://１２７.０.０.１:8080", "loopback"),  # as yarl dials it
        ("http://127。0。0。1", "loopback"),
        ("http://１６９.２５４.１６９.２５４/latest", "link_local"),
        ("http://ｌｏｃａｌｈｏｓｔ:80", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "ipv4_mapped:loopback"),
        ("http://[fe80::1%25eth0]/", "link_local"),
        ("http://1.2.3.999/", "malformed"),
        ("http://0x08.0x08.0x08.0x08/", "host_spelling"),  # 8.8.8.8, in hex
        ("http://134744072/", "host_spelling"),  # 8.8.8.8, as one number
        ("http://[::ffff:8.8.8.8]/", "ipv4_mapped:public"),
        ("http://８.８.８.８/", "host_spelling"),
        ("http://provider.example.com./", "host_spelling"),
        ("http://bücher.example/", "host_spelling"),  # a U-label: the A-label is the spelling
        ("http://xn--zz.example/", "host_spelling"),  # no valid A-label
        ("http://ｅｘａｍｐｌｅ.com/", "host_spelling"),
        ("http://exa_mple.com/", "host_spelling"),
        ("http://ex%41mple.com/", "host_spelling"),
        ("http://a..example/", "host_spelling"),
    ],
)
def test_other_spellings_are_refused_even_where_private_addresses_are_allowed(
    url: str, strict_reason: str
) -> None:
    assert check_base_url(url, allow_private=False) == strict_reason
    assert check_base_url(url, allow_private=True) == "host_spelling"


@pytest.mark.parametrize(
    "url",
    ["https://provider.example.com/base", "http://xn--bcher-kva.example:8080", "http://8.8.8.8",
     "https://API.Example.COM", "http://[2606:4700:4700::1111]:8443", "http://1e100.net"],
)  # fmt: skip
def test_ascii_names_and_canonical_literals_pass(url: str) -> None:
    assert check_base_url(url, allow_private=False) is None
    assert check_base_url(url, allow_private=True) is None


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", None),
        ("provider.example.com", None),
        ("xn--bcher-kva.example", None),
        ("::1", None),
        ("2606:4700:4700::1111", None),
        ("127.000.0.1", "host_spelling"),
        ("0x7f.1", "host_spelling"),
        ("::ffff:7f00:1", "host_spelling"),
        ("::ffff:127.0.0.1", "host_spelling"),
        ("fe80::1%eth0", "host_spelling"),
        ("１２７.０.０.１", "host_spelling"),
        ("example.com.", "host_spelling"),
        ("-bad.example", "host_spelling"),
        ("a" * 64 + ".example", "host_spelling"),
    ],
)
def test_the_host_a_client_dials_is_an_ascii_name_or_canonical_literal(
    host: str, reason: str | None
) -> None:
    assert host_spelling_reason(host) == reason
    assert guard.dialled_host_reason(host, allow_private=True) == reason


def test_a_url_with_whitespace_or_controls_is_malformed() -> None:
    # urlsplit drops a tab silently; no client must be handed what the check did not see
    assert check_base_url("http://127.0.0\t.1/", allow_private=False) == "malformed"
    assert check_base_url("http://exa\tmple.com/", allow_private=True) == "malformed"
    assert check_base_url("http://example.com/\n", allow_private=True) == "malformed"


def test_the_guard_exposes_the_same_rule() -> None:
    assert guard.literal_host_reason is literal_host_reason
    assert guard.check_base_url is check_base_url
    assert guard.host_spelling_reason is host_spelling_reason
