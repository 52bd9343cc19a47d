"""Pinning keeps the name: the socket goes to the checked IP, TLS still verifies the host name."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpcore
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from builders.event_loops import run_on_fresh_loop
from builders.listeners import read_request
from mercato.dispatch.client import ProviderClient
from mercato.dispatch.guard import forbidden_reason
from mercato.dispatch.transport import GuardedTransport
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

HOST = "provider.test"
PUBLIC_IP = "93.184.216.34"


def _cert(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a leaf for HOST signed by it (PEM files: ca, cert, key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (tmp / "ca.pem", tmp / "leaf.pem", tmp / "leaf.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@dataclass
class TlsServer:
    port: int
    sni: list[str | None] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[TlsServer, Path]]:
    ca, cert, key = _cert(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    raw = socket.socket()
    raw.bind(("127.0.0.1", 0))
    raw.listen(4)
    server = TlsServer(port=raw.getsockname()[1])

    def on_sni(_sock: Any, name: str | None, _ctx: Any) -> None:
        server.sni.append(name)

    context.sni_callback = on_sni

    def serve() -> None:
        conn, _ = raw.accept()
        # a client refusing the certificate ends the handshake: nothing to serve then
        with suppress(ssl.SSLError, OSError), context.wrap_socket(conn, server_side=True) as tls:
            server.requests.append(read_request(tls))
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server, ca
    raw.close()
    thread.join(timeout=5)


class _Internet(httpcore.NetworkBackend):
    def __init__(self, port: int) -> None:
        self.port = port
        self.dialled: list[str] = []

    def connect_tcp(self, host: str, port: int, **kwargs: Any) -> httpcore.NetworkStream:
        self.dialled.append(host)
        assert forbidden_reason(ipaddress.ip_address(host)) is None
        return httpcore.SyncBackend().connect_tcp("127.0.0.1", self.port, **kwargs)


def test_pinned_https_keeps_sni_host_header_and_certificate_check(
    tmp_path: Path, tls_server: tuple[TlsServer, Path]
) -> None:
    server, ca = tls_server
    internet = _Internet(server.port)
    transport = GuardedTransport(
        allow_private=False,
        resolver=lambda host, port: [PUBLIC_IP],
        inner=internet,
        ssl_context=ssl.create_default_context(cafile=str(ca)),
    )
    settings = Settings(env="dev", data_dir=tmp_path, allow_private_provider_addresses=False)
    target = DispatchTarget(
        connection_id="pcon_tls", base_url=f"https://{HOST}", credential="c", approved=True
    )
    with ProviderClient(settings, transport=transport) as client:
        answer = client.get(target, "/health/live", with_credential=False, max_bytes=64)

    assert (answer.status, answer.error) == (200, None)
    assert internet.dialled == [PUBLIC_IP]
    assert server.sni == [HOST]
    assert b"\r\nhost: provider.test\r\n" in server.requests[0].lower()


def _async_get(settings: Settings, ca: Path, url: str) -> Any:

    from mercato.dispatch.async_client import AsyncProviderClient

    target = DispatchTarget(connection_id="pcon_tls", base_url=url, credential="c", approved=True)

    async def call() -> Any:
        async with AsyncProviderClient(
            settings,
            resolver=lambda host, port: ["127.0.0.1"],
            ssl_context=ssl.create_default_context(cafile=str(ca)),
        ) as client:
            return await client.get(target, "/health/live", with_credential=False, max_bytes=64)

    return run_on_fresh_loop(call())


def test_the_async_client_dials_the_checked_address_and_still_verifies_the_name(
    tmp_path: Path, tls_server: tuple[TlsServer, Path]
) -> None:
    """The guard's answer (127.0.0.1, allowed here) is dialled; SNI, Host and the certificate
    check keep the provider's name."""
    server, ca = tls_server
    settings = Settings(env="dev", data_dir=tmp_path, allow_private_provider_addresses=True)
    answer = _async_get(settings, ca, f"https://{HOST}:{server.port}")
    assert (answer.status, answer.error) == (200, None)
    assert server.sni == [HOST]
    assert f"\r\nhost: {HOST}:{server.port}\r\n".encode() in server.requests[0].lower()


def test_the_async_client_refuses_a_certificate_for_another_name(
    tmp_path: Path, tls_server: tuple[TlsServer, Path]
) -> None:
    server, ca = tls_server
    settings = Settings(env="dev", data_dir=tmp_path, allow_private_provider_addresses=True)
    answer = _async_get(settings, ca, f"https://other.test:{server.port}")
    assert (answer.status, answer.error) == (None, "connect")
    assert server.requests == []
