"""A base URL's host is judged as the HTTP library will dial it (issue 39 item 3, decision 0520).

yarl folds full-width digits and ideographic full stops to ASCII, so `http://１２７.０.０.１:P`
passed the literal-address check and aiohttp dialled 127.0.0.1 with the connection's credential.
Every spelling below names the loopback listener once a library has normalised it (or a resolver
has read it); each is refused at submission (API and CLI, add and update) and before any connect
by both provider clients, also when it is already stored, and nothing ever reaches the listener.
"""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from builders.accounts import bearer, login, make_account
from builders.event_loops import run_on_fresh_loop
from builders.listeners import Listener, listener, read_request
from mercato.cli.main import main
from mercato.conformance.flows import check_connection
from mercato.db.runtime import Runtime
from mercato.dispatch.async_client import AsyncProviderClient
from mercato.dispatch.calls import RawAnswer
from mercato.dispatch.client import ProviderClient
from mercato.providers import service as providers
from mercato.providers.models import ProviderConnection
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings
from mercato.web.app import create_app

OWNER = "owner@example.com"
OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"

# Hosts that reach 127.0.0.1 once yarl, httpx or a resolver has read them.
SPELLINGS = [
    "１２７.０.０.１",  # full-width digits (yarl: 127.0.0.1)
    "１２７.0.0.1",  # some of them
    "127。0。0。1",  # ideographic full stops (yarl and httpx: 127.0.0.1)
    "127．0．0．1",  # full-width full stops
    "127｡0｡0｡1",  # halfwidth ideographic full stops
    "ｌｏｃａｌｈｏｓｔ",  # full-width letters (yarl: localhost)
    "2130706433",  # one decimal number (inet_aton)
    "0x7f.1",  # hex, short form
    "0177.0.0.1",  # octal
    "127.1",  # short form
    "127.0.0.1.",  # trailing dot
    "localhost.",
    "[::ffff:127.0.0.1]",  # IPv4-mapped IPv6, dotted
    "[::ffff:7f00:1]",  # IPv4-mapped IPv6, hex
]


@dataclass
class Sentinel:
    """A loopback listener that keeps every request head it is sent."""

    listener: Listener
    heads: list[bytes] = field(default_factory=list)
    credential: str = field(default_factory=lambda: f"spelling-secret-{uuid.uuid4().hex}")

    def url(self, host: str) -> str:
        return f"http://{host}:{self.listener.port}"

    def reached(self) -> list[bytes]:
        """Requests that carried this test's credential (a stray probe from another test that
        happens to connect to the port carries none)."""
        return [head for head in list(self.heads) if self.credential.encode() in head]


@pytest.fixture
def sentinel() -> Iterator[Sentinel]:
    heads: list[bytes] = []

    def script(conn: socket.socket, _listener: Listener) -> None:
        heads.append(read_request(conn))  # recorded before the answer is sent
        conn.sendall(OK_RESPONSE)

    with listener(script) as running:
        yield Sentinel(running, heads)


def _client_settings(tmp_path: Path, *, allow_private: bool) -> Settings:
    return Settings(
        env="dev",
        data_dir=tmp_path,
        allow_private_provider_addresses=allow_private,
        provider_timeout_seconds=3,
    )


def _target(url: str, credential: str) -> DispatchTarget:
    return DispatchTarget(
        connection_id="pcon_x", base_url=url, credential=credential, approved=True
    )


def test_the_canonical_spelling_does_reach_the_sentinel(tmp_path: Path, sentinel: Sentinel) -> None:
    """The control: with private addresses allowed, 127.0.0.1 itself is dialled and heard."""
    settings = _client_settings(tmp_path, allow_private=True)
    target = _target(sentinel.url("127.0.0.1"), sentinel.credential)
    with ProviderClient(settings) as client:
        answer = client.get(target, "/v1/health/live", with_credential=True, max_bytes=1024)
    assert (answer.status, answer.error) == (200, None)
    assert len(sentinel.reached()) == 1


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("host", SPELLINGS)
def test_the_sync_client_refuses_every_spelling_before_connecting(
    tmp_path: Path, sentinel: Sentinel, host: str, allow_private: bool
) -> None:
    settings = _client_settings(tmp_path, allow_private=allow_private)
    target = _target(sentinel.url(host), sentinel.credential)
    with ProviderClient(settings) as client:
        answer = client.get(target, "/v1/health/live", with_credential=True, max_bytes=1024)
    assert (answer.status, answer.body, answer.error) == (None, None, "blocked_address")
    assert sentinel.reached() == []


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("host", SPELLINGS)
def test_the_async_client_refuses_every_spelling_before_connecting(
    tmp_path: Path, sentinel: Sentinel, host: str, allow_private: bool
) -> None:
    settings = _client_settings(tmp_path, allow_private=allow_private)
    target = _target(sentinel.url(host), sentinel.credential)

    async def call() -> list[RawAnswer]:
        async with AsyncProviderClient(settings) as client:
            got = await client.get(target, "/v1/health/live", with_credential=True, max_bytes=1024)
            sent = await client.execute(
                target,
                idempotency_key="k-1",
                payload_bytes=b"{}",
                response_max_bytes=1024,
                timeout=3,
            )
            return [got, sent]

    for answer in run_on_fresh_loop(call()):
        assert (answer.status, answer.body, answer.error) == (None, None, "blocked_address")
    assert sentinel.reached() == []


# --- submission: the provider API and the CLI, on both stores ---------------------------------


@pytest.fixture
def strict(settings: Settings) -> Iterator[Runtime]:
    """A runtime that refuses private provider addresses, as production does."""
    runtime = Runtime.from_settings(
        settings.model_copy(update={"allow_private_provider_addresses": False})
    )
    make_account(runtime.db, OWNER)
    yield runtime
    runtime.db.dispose()


def _stored_urls(runtime: Runtime) -> list[str]:
    with runtime.db.read() as session:
        return list(session.scalars(select(ProviderConnection.base_url)))


@pytest.mark.parametrize("host", SPELLINGS)
def test_the_provider_api_refuses_every_spelling_and_stores_nothing(
    strict: Runtime, sentinel: Sentinel, host: str
) -> None:
    client = TestClient(create_app(strict), raise_server_exceptions=False)
    headers = bearer(login(client, OWNER)["accessToken"])
    body = {"name": "main", "baseUrl": sentinel.url(host), "credential": sentinel.credential}
    answer = client.post("/v1/provider/connections", json=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert (problem["code"], problem["field"]) == ("PROVIDER_ADDRESS_FORBIDDEN", "baseUrl")
    assert sentinel.credential not in answer.text
    assert _stored_urls(strict) == []
    assert sentinel.reached() == []


@dataclass
class Cli:
    capsys: pytest.CaptureFixture[str]

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err


@pytest.fixture(params=[False, True], ids=["strict", "dev"])
def cli(
    request: pytest.FixtureRequest,
    runtime: Runtime,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    """The admin CLI on the test's store, refusing private addresses or (dev) allowing them:
    either way a spelled host is refused."""
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(settings.data_dir))
    allow = "true" if request.param else "false"
    monkeypatch.setenv("MERCATO_ALLOW_PRIVATE_PROVIDER_ADDRESSES", allow)
    make_account(runtime.db, OWNER)
    capsys.readouterr()
    return Cli(capsys)


def _assert_refused_naming_base_url(result: tuple[int, str, str]) -> None:
    code, out, err = result
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--base-url" in lines[0], err
    assert out == ""


@pytest.mark.parametrize("host", SPELLINGS)
def test_the_cli_refuses_every_spelling_on_add_and_update(
    cli: Cli, runtime: Runtime, sentinel: Sentinel, host: str
) -> None:
    owner_id = _owner_id(runtime)
    added = cli(
        "admin", "add-connection", "--owner", OWNER, "--name", "spelled",
        "--base-url", sentinel.url(host), "--credential", sentinel.credential,
    )  # fmt: skip
    _assert_refused_naming_base_url(added)
    assert sentinel.credential not in added[2]
    assert _stored_urls(runtime) == []

    with runtime.db.transaction() as session:
        connection_id = providers.create_connection(
            session,
            owner_id=owner_id,
            name="public",
            base_url="https://provider.example.com",
            credential="conn-secret-0123456789abcdef",
            settings=runtime.settings,
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        ).id
    updated = cli("admin", "update-connection", connection_id, "--base-url", sentinel.url(host))
    _assert_refused_naming_base_url(updated)
    with runtime.db.read() as session:
        connection = providers.get_connection(session, connection_id=connection_id)
        assert (connection.base_url, connection.revision) == ("https://provider.example.com", 1)
    assert sentinel.reached() == []


def _owner_id(runtime: Runtime) -> str:
    from mercato.accounts import service as accounts

    with runtime.db.read() as session:
        return accounts.get_account_by_email(session, email=OWNER).id


# --- rows stored before this rule: refused before every connect -------------------------------


@pytest.mark.parametrize("host", ["１２７.０.０.１", "127。0。0。1", "[::ffff:127.0.0.1]"])
def test_a_spelled_host_already_stored_is_refused_before_connect(
    strict: Runtime, sentinel: Sentinel, host: str
) -> None:
    """A row written before the rule (put in directly): the conformance check (sync client) and
    a call through the async client on the stored target both refuse it, and nothing is sent."""
    with strict.db.transaction() as session:
        connection_id = providers.create_connection(
            session,
            owner_id=_owner_id(strict),
            name="legacy",
            base_url="https://provider.example.com",
            credential=sentinel.credential,
            settings=strict.settings,
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        ).id
        session.execute(
            update(ProviderConnection)
            .where(ProviderConnection.id == connection_id)
            .values(base_url=sentinel.url(host))
        )
    with ProviderClient(strict.settings) as client:
        run = check_connection(strict, client, connection_id=connection_id)
    assert run.passed is False
    assert {check.status for check in run.checks} <= {"failed", "skipped"}

    with strict.db.read() as session:
        target = providers.get_dispatch_target(
            session, connection_id=connection_id, settings=strict.settings
        )
    assert target.base_url == sentinel.url(host)

    async def call() -> Any:
        async with AsyncProviderClient(strict.settings) as client:
            return await client.execute(
                target,
                idempotency_key="k-1",
                payload_bytes=b"{}",
                response_max_bytes=1024,
                timeout=3,
            )

    answer = run_on_fresh_loop(call())
    assert (answer.status, answer.error) == (None, "blocked_address")
    assert sentinel.reached() == []
