"""AsyncProviderClient over real loopback sockets: every guard rule of the sync client, and the
same answers as the sync client for the same provider behaviour (a parity table)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from builders.event_loops import run_on_fresh_loop
from builders.listeners import Listener, keep_alive, listener, read_request, respond
from mercato.dispatch.async_client import AsyncProviderClient, GuardedResolver
from mercato.dispatch.client import ArtifactFetchError, ProviderClient, RawAnswer
from mercato.dispatch.guard import BlockedAddress
from mercato.dispatch.outcomes import classify
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

SECRET = "cred-Aq8wPq3Lr5TtY7uZ"
ENVELOPE = b'{"outcome":"SUCCEEDED","correlationId":"j1","result":{"echo":{"n":1}}}'
OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine on a fresh event loop (the client is built inside it)."""

    async def main() -> T:
        return await make()

    return run_on_fresh_loop(main())


def settings(tmp_path: Path, *, allow_private: bool = True, timeout: float = 5) -> Settings:
    return Settings(
        env="dev",
        data_dir=tmp_path,
        allow_private_provider_addresses=allow_private,
        provider_timeout_seconds=timeout,
    )


def target(url: str) -> DispatchTarget:
    return DispatchTarget(connection_id="pcon_a", base_url=url, credential=SECRET, approved=True)


def http(status: str, body: bytes, *, headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    ).encode() + body


async def once(
    config: Settings,
    call: Callable[[AsyncProviderClient], Awaitable[T]],
    *,
    resolver: Any = None,
) -> T:
    async with AsyncProviderClient(config, resolver=resolver) as client:
        return await call(client)


# --- provider behaviours (scripts for a raw loopback listener) ------------------------------


def _unbounded(conn: socket.socket, state: Listener) -> None:
    """No Content-Length: chunked, and it never stops on its own."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"y" * 4096
    while not state.release.is_set():
        conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def _silent(conn: socket.socket, state: Listener) -> None:
    read_request(conn)
    state.release.wait(30)


def _trickle(conn: socket.socket, state: Listener) -> None:
    """Slowloris: a byte now and then, each well inside the per-read timeout."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    while not state.release.wait(0.05):
        conn.sendall(b"a")


def _hang_up(conn: socket.socket, _state: Listener) -> None:
    read_request(conn)


_keep_alive = keep_alive(
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ENVELOPE), ENVELOPE)
)
"""Answer every request on the connection until the client closes it."""


@dataclass(frozen=True)
class Scenario:
    name: str
    script: Callable[[socket.socket, Listener], None]
    max_bytes: int = 4096
    timeout: float = 5.0


SCENARIOS = [
    Scenario("success", respond(http("200 OK", ENVELOPE))),
    Scenario(
        "defined_failure",
        respond(
            http(
                "409 Conflict",
                b'{"outcome":"DEFINED_FAILURE","correlationId":"a","errorCode":"X",'
                b'"httpStatus":409}',
            )
        ),
    ),
    Scenario(
        "unknown_outcome",
        respond(http("202 Accepted", b'{"outcome":"UNKNOWN_OUTCOME","correlationId":"j"}')),
    ),
    Scenario("malformed_json", respond(http("200 OK", b'{"outcome":'))),
    Scenario("status_mismatch", respond(http("500 Oops", ENVELOPE))),
    Scenario(
        "redirect",
        respond(http("307 Temporary Redirect", b"", headers="Location: http://10.0.0.1/\r\n")),
    ),
    Scenario("too_large_declared", respond(http("200 OK", b"x" * 5000)), max_bytes=100),
    Scenario("too_large_chunked", _unbounded, max_bytes=10_000),
    Scenario(
        "too_large_close_delimited",
        respond(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"z" * 50_000),
        max_bytes=1000,
    ),
    Scenario("silent", _silent, timeout=0.3),
    Scenario("trickle", _trickle, max_bytes=200_000, timeout=0.5),
    Scenario(
        "dropped_mid_body",
        respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"outcome":'),
    ),
    Scenario("dropped_before_answer", _hang_up),
]


def _sync_execute(config: Settings, url: str, scenario: Scenario) -> RawAnswer:
    with ProviderClient(config) as client:
        return client.execute(
            target(url),
            idempotency_key="k-1",
            payload_bytes=b'{"n":1}',
            response_max_bytes=scenario.max_bytes,
            timeout=scenario.timeout,
        )


def _async_execute(config: Settings, url: str, scenario: Scenario) -> RawAnswer:
    return run(
        lambda: once(
            config,
            lambda client: client.execute(
                target(url),
                idempotency_key="k-1",
                payload_bytes=b'{"n":1}',
                response_max_bytes=scenario.max_bytes,
                timeout=scenario.timeout,
            ),
        )
    )


EXPECTED = {
    "success": (200, "SUCCEEDED", None),
    "defined_failure": (409, "DEFINED_FAILURE", None),
    "unknown_outcome": (202, "UNKNOWN_OUTCOME", None),
    "malformed_json": (200, "UNKNOWN_OUTCOME", None),
    "status_mismatch": (500, "UNKNOWN_OUTCOME", None),
    "redirect": (307, "UNKNOWN_OUTCOME", "redirect"),
    "too_large_declared": (200, "UNKNOWN_OUTCOME", "too_large"),
    "too_large_chunked": (200, "UNKNOWN_OUTCOME", "too_large"),
    "too_large_close_delimited": (200, "UNKNOWN_OUTCOME", "too_large"),
    "silent": (None, "UNKNOWN_OUTCOME", "timeout"),
    "trickle": (200, "UNKNOWN_OUTCOME", "timeout"),
    "dropped_mid_body": (200, "UNKNOWN_OUTCOME", "read"),
    "dropped_before_answer": (None, "UNKNOWN_OUTCOME", "read"),
}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_parity_with_the_sync_client(tmp_path: Path, scenario: Scenario) -> None:
    """The same provider behaviour gives the same answer and the same outcome on both clients."""
    config = settings(tmp_path)
    answers: list[RawAnswer] = []
    for call in (_sync_execute, _async_execute):
        with listener(scenario.script) as provider:
            answers.append(call(config, provider.url, scenario))
    sync_answer, async_answer = answers
    assert (async_answer.status, async_answer.body, async_answer.error) == (
        sync_answer.status,
        sync_answer.body,
        sync_answer.error,
    )
    sync_classified, async_classified = classify(sync_answer), classify(async_answer)
    assert async_classified == sync_classified
    status, outcome, error = EXPECTED[scenario.name]
    assert async_answer.status == status
    assert (async_classified.outcome.value, async_answer.error) == (outcome, error)


def test_a_well_behaved_answer_is_parsed_as_the_sync_client_parses_it(tmp_path: Path) -> None:
    config = settings(tmp_path)
    with listener(respond(http("200 OK", ENVELOPE))) as provider:
        answer = _async_execute(config, provider.url, SCENARIOS[0])
    classified = classify(answer)
    assert classified.envelope is not None
    assert classified.envelope.result == {"echo": {"n": 1}}
    assert classified.envelope.correlation_id == "j1"
    assert classified.reason == "envelope"


def test_nothing_listening_is_a_connect_error_on_both_clients(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    config = settings(tmp_path)
    sync_answer = _sync_execute(config, url, SCENARIOS[0])
    async_answer = _async_execute(config, url, SCENARIOS[0])
    assert (sync_answer.error, async_answer.error) == ("connect", "connect")


@pytest.mark.parametrize(
    ("url", "answers"),
    [
        ("http://provider.example:{port}", ["10.0.0.7"]),
        ("http://provider.example:{port}", ["93.184.216.34", "::1"]),
        ("http://127.0.0.1:{port}", ["127.0.0.1"]),
        ("http://localhost:{port}", ["127.0.0.1"]),
        ("file:///etc/passwd", ["93.184.216.34"]),
    ],
)
def test_guard_refusals_match_the_sync_client(
    tmp_path: Path, sentinel: Sentinel, url: str, answers: list[str]
) -> None:
    """Private addresses not allowed: the same refusal on both clients, and no connection."""
    config = settings(tmp_path, allow_private=False)
    provider = target(url.format(port=sentinel.port))
    with ProviderClient(config, resolver=lambda h, p: answers) as client:
        sync_answer = client.get(provider, sentinel.path, with_credential=False, max_bytes=64)
    async_answer = run(
        lambda: once(
            config,
            lambda c: c.get(provider, sentinel.path, with_credential=False, max_bytes=64),
            resolver=lambda h, p: answers,
        )
    )
    assert (sync_answer.status, sync_answer.error) == (None, "blocked_address")
    assert (async_answer.status, async_answer.error) == (None, "blocked_address")
    assert classify(async_answer) == classify(sync_answer)
    assert sentinel.listener.count() == 0


# --- what is sent ----------------------------------------------------------------------------


def test_execute_sends_only_the_wrapped_payload_with_credential_and_key(tmp_path: Path) -> None:
    captured: list[bytes] = []

    def script(conn: socket.socket, _: Listener) -> None:
        captured.append(read_request(conn))
        conn.sendall(http("200 OK", ENVELOPE))

    with listener(script) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path),
                lambda client: client.execute(
                    target(provider.url),
                    idempotency_key="inv_123:1",
                    payload_bytes=b'{"chart":"overall"}',
                    response_max_bytes=1024,
                    timeout=5,
                ),
            )
        )
    assert (answer.status, answer.body, answer.error) == (200, ENVELOPE, None)
    head, _, body = captured[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/executions HTTP/1.1")
    assert json.loads(body) == {"payload": {"chart": "overall"}}
    lowered = head.lower()
    assert f"authorization: bearer {SECRET}".lower().encode() in lowered
    assert b"idempotency-key: inv_123:1" in lowered
    assert b"content-type: application/json" in lowered
    assert b"accept-encoding: identity" in lowered


def test_reconcile_sends_the_key(tmp_path: Path) -> None:
    captured: list[bytes] = []

    def script(conn: socket.socket, _: Listener) -> None:
        captured.append(read_request(conn))
        conn.sendall(http("202 Accepted", b'{"outcome":"UNKNOWN_OUTCOME","correlationId":"j"}'))

    with listener(script) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path),
                lambda client: client.reconcile(
                    target(provider.url), idempotency_key="k-1", response_max_bytes=1024, timeout=5
                ),
            )
        )
    assert answer.status == 202
    head, _, body = captured[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/reconciliations")
    assert json.loads(body) == {"providerIdempotencyKey": "k-1"}


def test_one_client_reuses_its_connection_and_never_returns_a_cookie(tmp_path: Path) -> None:
    captured: list[bytes] = []

    def script(conn: socket.socket, state: Listener) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            captured.append(request)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nSet-Cookie: s=tracked; Path=/\r\n\r\n%s"
                % (len(ENVELOPE), ENVELOPE)
            )

    async def three(client: AsyncProviderClient, url: str) -> list[RawAnswer]:
        return [
            await client.execute(
                target(url),
                idempotency_key=f"k-{n}",
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            )
            for n in range(3)
        ]

    with listener(script) as provider:
        answers = run(lambda: once(settings(tmp_path), lambda c: three(c, provider.url)))
        assert provider.count() == 1  # one pooled keep-alive connection for the three calls
    assert [a.status for a in answers] == [200, 200, 200]
    heads = [request.partition(b"\r\n\r\n")[0].lower() for request in captured]
    assert len(heads) == 3
    assert all(b"\r\ncookie:" not in head for head in heads), heads


@pytest.mark.parametrize(
    ("idle", "connections"), [(3.9, 1), (4.99, 2)], ids=["reused", "dropped-before-5s"]
)
def test_an_idle_connection_is_dropped_before_a_provider_would_close_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idle: float, connections: int
) -> None:
    """uvicorn (like Node and Apache) closes a keep-alive connection after 5 s idle. A call sent
    on it as the provider closes it is reset unanswered: an unknown outcome (a 202 and a
    reconciliation for a call the provider never saw, decision 0500). So the pool reuses a
    connection only while it has been idle well under those 5 s, and dials a new one after.
    The pool's own clock (aiohttp's) is moved by hand: no waiting."""
    clock = [1000.0]
    monkeypatch.setattr(aiohttp.connector, "monotonic", lambda: clock[0])

    async def two(client: AsyncProviderClient, url: str) -> list[int | None]:
        statuses = []
        for n in range(2):
            answer = await client.execute(
                target(url),
                idempotency_key=f"k-{n}",
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            )
            statuses.append(answer.status)
            clock[0] += idle
        return statuses

    with listener(_keep_alive) as provider:
        statuses = run(lambda: once(settings(tmp_path), lambda c: two(c, provider.url)))
        assert provider.count() == connections
    assert statuses == [200, 200]


def test_a_closed_client_refuses_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = AsyncProviderClient(settings(tmp_path))
        with listener(_keep_alive) as provider:
            first = await client.get(
                target(provider.url), "/health/live", with_credential=False, max_bytes=1024
            )
            assert first.status == 200
            await client.aclose()
            with pytest.raises(RuntimeError, match="closed"):
                await client.get(
                    target(provider.url), "/health/live", with_credential=False, max_bytes=1024
                )

    run(scenario)


# --- the SSRF guard ----------------------------------------------------------------------------


@dataclass
class Sentinel:
    """A loopback listener that keeps the heads of requests for its own (unique) path."""

    listener: Listener
    heads: list[bytes] = field(default_factory=list)
    path: str = field(default_factory=lambda: f"/guard-probe-{uuid.uuid4().hex}")

    @property
    def port(self) -> int:
        return self.listener.port

    def heard(self) -> int:
        line = f"GET {self.path} ".encode()
        return sum(1 for head in list(self.heads) if head.startswith(line))


@pytest.fixture
def sentinel() -> Iterator[Sentinel]:
    heads: list[bytes] = []

    def script(conn: socket.socket, _listener: Listener) -> None:
        heads.append(read_request(conn))
        conn.sendall(OK_RESPONSE)

    with listener(script) as running:
        yield Sentinel(running, heads)


FORBIDDEN = [
    "127.0.0.1",
    "10.1.2.3",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "fd12:3456::1",
    "::ffff:127.0.0.1",
    "64:ff9b::7f00:1",
    "2001:db8::1",
]


@pytest.mark.parametrize("address", FORBIDDEN)
def test_a_name_resolving_to_a_forbidden_address_is_refused_before_connecting(
    tmp_path: Path, sentinel: Sentinel, address: str
) -> None:
    calls: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> Sequence[str]:
        calls.append((host, port))
        return [address]

    answer = run(
        lambda: once(
            settings(tmp_path, allow_private=False),
            lambda client: client.get(
                target(f"http://provider.example:{sentinel.port}"),
                sentinel.path,
                with_credential=False,
                max_bytes=1024,
            ),
            resolver=resolver,
        )
    )
    assert (answer.status, answer.error) == (None, "blocked_address")
    assert calls == [("provider.example", sentinel.port)]
    assert sentinel.heard() == 0
    assert sentinel.listener.count() == 0  # not even a TCP connection


def test_one_forbidden_answer_among_public_ones_refuses_the_name(
    tmp_path: Path, sentinel: Sentinel
) -> None:
    answer = run(
        lambda: once(
            settings(tmp_path, allow_private=False),
            lambda client: client.get(
                target(f"http://mixed.example:{sentinel.port}"),
                sentinel.path,
                with_credential=False,
                max_bytes=1024,
            ),
            resolver=lambda h, p: ["93.184.216.34", "127.0.0.1"],
        )
    )
    assert answer.error == "blocked_address"
    assert sentinel.listener.count() == 0


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "127.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
    ],
)
def test_a_literal_loopback_host_is_refused_without_a_connection(
    tmp_path: Path, sentinel: Sentinel, host: str
) -> None:
    answer = run(
        lambda: once(
            settings(tmp_path, allow_private=False),
            lambda client: client.get(
                target(f"http://{host}:{sentinel.port}"),
                sentinel.path,
                with_credential=False,
                max_bytes=1024,
            ),
        )
    )
    assert (answer.status, answer.error) == (None, "blocked_address")
    assert sentinel.listener.count() == 0


def test_the_connection_goes_to_the_checked_address_with_no_second_lookup(
    tmp_path: Path, sentinel: Sentinel
) -> None:
    """`checked.example` exists in no DNS: the listener is reached only because aiohttp dialled
    exactly the address the guard's one lookup returned."""
    calls: list[str] = []

    def resolver(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return ["127.0.0.1"]

    answer = run(
        lambda: once(
            settings(tmp_path, allow_private=True),
            lambda client: client.get(
                target(f"http://checked.example:{sentinel.port}"),
                sentinel.path,
                with_credential=False,
                max_bytes=1024,
            ),
            resolver=resolver,
        )
    )
    assert (answer.status, answer.error) == (200, None)
    assert calls == ["checked.example"]
    assert sentinel.heard() == 1
    host_line = f"host: checked.example:{sentinel.port}".encode()
    assert host_line in sentinel.heads[0].lower()  # the name, not the address, in Host


def test_the_guarded_resolver_checks_every_lookup_so_a_rebinding_name_is_refused() -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    resolver = GuardedResolver(allow_private=False, lookup=lambda h, p: next(answers))

    async def twice() -> tuple[Any, BaseException | None]:
        first = await resolver.resolve("rebind.example", 443)
        try:
            await resolver.resolve("rebind.example", 443)
        except BlockedAddress as exc:
            return first, exc
        return first, None

    first, refused = run(twice)
    assert [(r["hostname"], r["host"], r["port"]) for r in first] == [
        ("rebind.example", "93.184.216.34", 443)
    ]
    assert ipaddress.ip_address(first[0]["host"]).version == 4
    assert isinstance(refused, BlockedAddress) and refused.reason == "loopback"


def test_a_redirect_is_returned_as_is_and_never_followed(
    tmp_path: Path, sentinel: Sentinel
) -> None:
    location = f"Location: http://127.0.0.1:{sentinel.port}{sentinel.path}\r\n"
    with listener(respond(http("302 Found", b"", headers=location))) as public_host:
        answer = run(
            lambda: once(
                settings(tmp_path, allow_private=True),
                lambda client: client.get(
                    target(public_host.url), "/x", with_credential=False, max_bytes=64
                ),
            )
        )
        assert public_host.count() == 1
    assert (answer.status, answer.error) == (302, "redirect")
    assert sentinel.heard() == 0


# --- byte cap, timeouts --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [100, 101, 5000])
def test_body_over_the_limit_with_content_length(tmp_path: Path, size: int) -> None:
    with listener(respond(http("200 OK", b"x" * size))) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path),
                lambda client: client.get(
                    target(provider.url), "/big", with_credential=False, max_bytes=100
                ),
            )
        )
    if size <= 100:
        assert (answer.error, answer.body) == (None, b"x" * size)
    else:
        assert (answer.status, answer.body, answer.error) == (200, None, "too_large")


def test_the_cap_stops_an_endless_body_mid_stream(tmp_path: Path) -> None:
    """The provider never stops sending: only the cap can end the read."""
    with listener(_unbounded) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path),
                lambda client: client.get(
                    target(provider.url), "/big", with_credential=False, max_bytes=10_000
                ),
            )
        )
    assert (answer.status, answer.body, answer.error) == (200, None, "too_large")


def test_a_trickling_body_is_cut_off_by_the_whole_call_deadline(tmp_path: Path) -> None:
    with listener(_trickle) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path),
                lambda client: client.get(
                    target(provider.url),
                    "/slow",
                    with_credential=False,
                    max_bytes=200_000,
                    timeout=0.5,
                ),
            )
        )
    assert (answer.status, answer.error) == (200, "timeout")
    assert classify(answer).reason == "transport:timeout"


def test_the_settings_timeout_applies_when_the_call_names_none(tmp_path: Path) -> None:
    with listener(_silent) as provider:
        answer = run(
            lambda: once(
                settings(tmp_path, timeout=0.3),
                lambda client: client.get(
                    target(provider.url), "/slow", with_credential=False, max_bytes=64
                ),
            )
        )
    assert (answer.status, answer.error) == (None, "timeout")


def test_fetch_artifact_verifies_the_digest(tmp_path: Path) -> None:
    blob = b"\x89PNG fake image bytes"
    digest = hashlib.sha256(blob).hexdigest()
    config = settings(tmp_path)

    def fetch(url: str, max_bytes: int) -> bytes:
        return run(
            lambda: once(
                config, lambda c: c.fetch_artifact(target(url), digest, max_bytes=max_bytes)
            )
        )

    with listener(respond(http("200 OK", blob))) as provider:
        assert fetch(provider.url, 1024) == blob
    with (
        listener(respond(http("200 OK", blob + b"!"))) as provider,
        pytest.raises(ArtifactFetchError, match="digest_mismatch"),
    ):
        fetch(provider.url, 1024)
    with (
        listener(respond(http("200 OK", blob))) as provider,
        pytest.raises(ArtifactFetchError, match="too_large"),
    ):
        fetch(provider.url, 4)


def test_credential_never_reaches_answers_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[RawAnswer] = []
    scripts = (
        respond(http("200 OK", ENVELOPE)),
        _silent,
        respond(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
    )
    for script in scripts:
        with listener(script) as provider:
            answers.append(_async_execute(settings(tmp_path), provider.url, SCENARIOS[9]))
    assert [a.error for a in answers] == [None, "timeout", "read"]
    assert all(SECRET not in repr(answer) for answer in answers)
    assert SECRET not in caplog.text


def test_the_observed_async_client_logs_each_call_without_the_credential(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mercato.dispatch.observed import AsyncObservedProviderClient

    caplog.set_level(logging.INFO, logger="mercato.dispatch")

    async def call(url: str) -> RawAnswer:
        async with AsyncObservedProviderClient(settings(tmp_path)) as client:
            return await client.execute(
                target(url),
                idempotency_key="k-obs",
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            )

    with listener(respond(http("200 OK", ENVELOPE))) as provider:
        answer = run(lambda: call(provider.url))
    assert answer.status == 200
    lines = [r for r in caplog.records if r.getMessage() == "provider call"]
    assert len(lines) == 1
    line: Any = lines[0]
    assert (line.operation, line.provider_status, line.connection_id) == ("execute", 200, "pcon_a")
    assert SECRET not in caplog.text


def test_a_post_dropped_on_a_reused_connection_is_never_sent_again(tmp_path: Path) -> None:
    """The provider answers the first call on a keep-alive connection, then reads the second
    and hangs up: the second call is `read` (unknown outcome) on both clients, and the provider
    received it exactly once (a retry would be a second send of a paid call)."""

    def make_script(heard: list[bytes]) -> Callable[[socket.socket, Listener], None]:
        def script(conn: socket.socket, _state: Listener) -> None:
            heard.append(read_request(conn))
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ENVELOPE), ENVELOPE)
            )
            heard.append(read_request(conn))  # then close without answering

        return script

    def two_sync(url: str) -> list[RawAnswer]:
        with ProviderClient(settings(tmp_path)) as client:
            return [
                client.execute(
                    target(url),
                    idempotency_key=f"k-{n}",
                    payload_bytes=b'{"n":1}',
                    response_max_bytes=1024,
                    timeout=5,
                )
                for n in range(2)
            ]

    async def _two_async_in(config: Settings, url: str) -> list[RawAnswer]:
        async with AsyncProviderClient(config) as client:
            return [await _one(client, url, n) for n in range(2)]

    async def _one(client: AsyncProviderClient, url: str, n: int) -> RawAnswer:
        return await client.execute(
            target(url),
            idempotency_key=f"k-{n}",
            payload_bytes=b'{"n":1}',
            response_max_bytes=1024,
            timeout=5,
        )

    results = {}
    for name in ("sync", "async"):
        heard: list[bytes] = []
        with listener(make_script(heard)) as provider:
            if name == "sync":
                answers = two_sync(provider.url)
            else:
                answers = run_on_fresh_loop(_two_async_in(settings(tmp_path), provider.url))
            connections = provider.count()
        keys = [h for r in heard if r for h in r.split(b"\r\n") if h.lower().startswith(b"idem")]
        results[name] = ([(a.status, a.error) for a in answers], keys, connections)
    assert results["async"] == results["sync"]
    answers_seen, keys, connections = results["async"]
    assert answers_seen == [(200, None), (None, "read")]
    assert keys == [b"Idempotency-Key: k-0", b"Idempotency-Key: k-1"]
    assert connections == 1


def test_the_request_head_is_exactly_the_platforms_every_header_in_order(tmp_path: Path) -> None:
    """Every byte of the head, pinned: the fixed headers are the session's own (decision 0445),
    and a call's own follow them, so a change in how they are merged shows here."""
    captured: list[bytes] = []

    def script(conn: socket.socket, _: Listener) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            captured.append(request)
            conn.sendall(http("200 OK", ENVELOPE).replace(b"Connection: close\r\n", b""))

    async def calls(client: AsyncProviderClient, url: str) -> list[RawAnswer]:
        return [
            await client.execute(
                target(url),
                idempotency_key="inv_123:1",
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            ),
            await client.get(target(url), "/health/ready", with_credential=False, max_bytes=64),
        ]

    with listener(script) as provider:
        answers = run(lambda: once(settings(tmp_path), lambda c: calls(c, provider.url)))
    assert [a.status for a in answers] == [200, 200]
    host = provider.url.removeprefix("http://").encode()
    agent = f"mercato (aiohttp/{aiohttp.__version__})".encode()
    assert captured == [
        b"POST /v1/executions HTTP/1.1\r\nHost: " + host + b"\r\n"
        b"Accept: application/json\r\nAccept-Encoding: identity\r\nUser-Agent: " + agent + b"\r\n"
        b"Authorization: Bearer " + SECRET.encode() + b"\r\nIdempotency-Key: inv_123:1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 19\r\n\r\n"
        b'{"payload":{"n":1}}',
        b"GET /health/ready HTTP/1.1\r\nHost: " + host + b"\r\n"
        b"Accept: application/json\r\nAccept-Encoding: identity\r\nUser-Agent: " + agent + b"\r\n"
        b"\r\n",
    ]


@pytest.mark.parametrize("seconds", [0.3, 5.0, 12.25])
def test_one_whole_call_deadline_exact_to_the_second_it_names(
    tmp_path: Path, seconds: float
) -> None:
    """The call's timeout is one deadline over the whole call (connect, every read, the body:
    the silent and trickle cases above), never rounded up to a whole second as aiohttp rounds
    deadlines of 5 s and more by default (decision 0445)."""
    client = AsyncProviderClient(settings(tmp_path))
    timeout = client._timeout(seconds)
    assert timeout.total == seconds
    assert timeout.ceil_threshold > seconds
