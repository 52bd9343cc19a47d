"""ProviderClient over real sockets: no redirects, bounded bodies, deadlines, errors, no secrets."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpcore._sync.http11
import httpx
import pytest

from builders.listeners import Listener, keep_alive, listener, read_request, respond
from mercato.dispatch.client import ArtifactFetchError, ProviderClient, RawAnswer
from mercato.providers.schemas import DispatchTarget
from mercato.settings import Settings

SECRET = "cred-Zq8wPq3Lr5TtY7uV"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[ProviderClient]:
    settings = Settings(env="dev", data_dir=tmp_path, provider_timeout_seconds=5)
    with ProviderClient(settings) as provider_client:
        yield provider_client


def target(url: str) -> DispatchTarget:
    return DispatchTarget(connection_id="pcon_c", base_url=url, credential=SECRET, approved=True)


def http(status: str, body: bytes, *, headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    ).encode() + body


def test_execute_sends_only_the_wrapped_payload_with_credential_and_key(
    client: ProviderClient,
) -> None:
    captured: list[bytes] = []
    envelope = b'{"outcome":"SUCCEEDED","correlationId":"j1","result":{}}'

    def script(conn: socket.socket, _: Listener) -> None:
        captured.append(read_request(conn))
        conn.sendall(http("200 OK", envelope))

    with listener(script) as provider:
        answer = client.execute(
            target(provider.url),
            idempotency_key="inv_123:1",
            payload_bytes=b'{"chart":"overall"}',
            response_max_bytes=1024,
            timeout=5,
        )
    assert (answer.status, answer.body, answer.error) == (200, envelope, None)
    head, _, body = captured[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/executions HTTP/1.1")
    assert json.loads(body) == {"payload": {"chart": "overall"}}
    lowered = head.lower()
    assert f"authorization: bearer {SECRET}".lower().encode() in lowered
    assert b"idempotency-key: inv_123:1" in lowered
    assert b"content-type: application/json" in lowered


def test_reconcile_sends_the_key(client: ProviderClient) -> None:
    captured: list[bytes] = []

    def script(conn: socket.socket, _: Listener) -> None:
        captured.append(read_request(conn))
        conn.sendall(http("202 Accepted", b'{"outcome":"UNKNOWN_OUTCOME","correlationId":"j"}'))

    with listener(script) as provider:
        answer = client.reconcile(
            target(provider.url), idempotency_key="k-1", response_max_bytes=1024, timeout=5
        )
    assert answer.status == 202
    head, _, body = captured[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/reconciliations")
    assert json.loads(body) == {"providerIdempotencyKey": "k-1"}


def test_a_cookie_a_provider_sets_is_never_sent_back(client: ProviderClient) -> None:
    captured: list[bytes] = []
    envelope = b'{"outcome":"SUCCEEDED","correlationId":"j1","result":{}}'

    def script(conn: socket.socket, _: Listener) -> None:
        captured.append(read_request(conn))
        conn.sendall(http("200 OK", envelope, headers="Set-Cookie: session=tracked; Path=/\r\n"))

    with listener(script) as provider:
        for key in ("k-1", "k-2"):
            answer = client.execute(
                target(provider.url),
                idempotency_key=key,
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            )
            assert answer.status == 200
    assert len(captured) == 2
    heads = [request.partition(b"\r\n\r\n")[0].lower() for request in captured]
    assert all(b"\r\ncookie:" not in head for head in heads), heads
    assert all(b"accept: application/json" in head for head in heads)


def test_redirect_is_returned_as_is_and_never_followed(client: ProviderClient) -> None:
    with listener(respond(http("200 OK", b"{}"))) as elsewhere:
        location = f"Location: {elsewhere.url}/v1/executions\r\n"
        with listener(respond(http("307 Temporary Redirect", b"", headers=location))) as provider:
            answer = client.execute(
                target(provider.url),
                idempotency_key="k",
                payload_bytes=b'{"a":1}',
                response_max_bytes=1024,
                timeout=5,
            )
        assert (answer.status, answer.error) == (307, "redirect")
        assert elsewhere.count() == 0


@pytest.mark.parametrize("size", [100, 101, 5000])
def test_body_over_the_limit_with_content_length(client: ProviderClient, size: int) -> None:
    with listener(respond(http("200 OK", b"x" * size))) as provider:
        answer = client.get(target(provider.url), "/big", with_credential=False, max_bytes=100)
    if size <= 100:
        assert (answer.error, answer.body) == (None, b"x" * size)
    else:
        assert (answer.status, answer.body, answer.error) == (200, None, "too_large")


def _unbounded(conn: socket.socket, listener_state: Listener) -> None:
    """No Content-Length: chunked, and it never stops on its own."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"y" * 4096
    while not listener_state.release.is_set():
        conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def test_body_over_the_limit_without_content_length(client: ProviderClient) -> None:
    with listener(_unbounded) as provider:
        answer = client.get(target(provider.url), "/big", with_credential=False, max_bytes=10_000)
    assert (answer.status, answer.body, answer.error) == (200, None, "too_large")


def test_close_delimited_body_over_the_limit(client: ProviderClient) -> None:
    raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"z" * 50_000
    with listener(respond(raw)) as provider:
        answer = client.get(target(provider.url), "/big", with_credential=False, max_bytes=1000)
    assert answer.error == "too_large"


def _silent(conn: socket.socket, listener_state: Listener) -> None:
    read_request(conn)
    listener_state.release.wait(30)


def test_no_answer_is_a_timeout(client: ProviderClient) -> None:
    with listener(_silent) as provider:
        answer = client.execute(
            target(provider.url),
            idempotency_key="k",
            payload_bytes=b'{"a":1}',
            response_max_bytes=1024,
            timeout=0.3,
        )
    assert (answer.status, answer.body, answer.error) == (None, None, "timeout")


def _trickle(conn: socket.socket, listener_state: Listener) -> None:
    """Slowloris: a byte now and then, each well inside the per-read timeout."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    while not listener_state.release.wait(0.05):
        conn.sendall(b"a")


def test_a_trickling_body_is_cut_off_by_the_whole_call_deadline(client: ProviderClient) -> None:
    with listener(_trickle) as provider:
        answer = client.get(
            target(provider.url), "/slow", with_credential=False, max_bytes=200_000, timeout=0.5
        )
    assert (answer.status, answer.error) == (200, "timeout")


def test_connection_dropped_mid_body_is_a_read_error(client: ProviderClient) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"outcome":'
    with listener(respond(raw)) as provider:
        answer = client.get(target(provider.url), "/x", with_credential=False, max_bytes=4096)
    assert (answer.body, answer.error) == (None, "read")


def test_connection_dropped_before_any_answer_is_a_read_error(client: ProviderClient) -> None:
    with listener(lambda conn, _: read_request(conn) and None) as provider:
        answer = client.get(target(provider.url), "/x", with_credential=False, max_bytes=4096)
    assert (answer.status, answer.error) == (None, "read")


def test_nothing_listening_is_a_connect_error(client: ProviderClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    answer = client.get(target(f"http://127.0.0.1:{port}"), "/", with_credential=False, max_bytes=1)
    assert (answer.status, answer.error) == (None, "connect")


def test_fetch_artifact_verifies_the_digest(client: ProviderClient) -> None:
    blob = b"\x89PNG fake image bytes"
    digest = hashlib.sha256(blob).hexdigest()
    with listener(respond(http("200 OK", blob))) as provider:
        assert client.fetch_artifact(target(provider.url), digest, max_bytes=1024) == blob
    with (
        listener(respond(http("200 OK", blob + b"!"))) as provider,
        pytest.raises(ArtifactFetchError, match="digest_mismatch"),
    ):
        client.fetch_artifact(target(provider.url), digest, max_bytes=1024)
    with (
        listener(respond(http("200 OK", blob))) as provider,
        pytest.raises(ArtifactFetchError, match="too_large"),
    ):
        client.fetch_artifact(target(provider.url), digest, max_bytes=4)


def test_credential_never_reaches_answers_or_logs(
    client: ProviderClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # httpcore's debug lines, whatever level an earlier in-process `configure()` left it at
    caplog.set_level(logging.DEBUG, logger="httpcore")
    answers: list[RawAnswer] = []
    ok = http("200 OK", b'{"outcome":"SUCCEEDED","correlationId":"j","result":{}}')
    for script in (respond(ok), _silent, respond(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")):
        with listener(script) as provider:
            answers.append(
                client.execute(
                    target(provider.url),
                    idempotency_key="k",
                    payload_bytes=b'{"a":1}',
                    response_max_bytes=1024,
                    timeout=0.3,
                )
            )
    assert [a.error for a in answers] == [None, "timeout", "read"]
    assert all(SECRET not in repr(answer) for answer in answers)
    assert SECRET not in repr(target("http://x"))
    assert caplog.records, "debug logging was captured"
    assert SECRET not in caplog.text


_ENVELOPE = b'{"outcome":"SUCCEEDED","correlationId":"j1","result":{}}'
_keep_alive = keep_alive(
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(_ENVELOPE), _ENVELOPE)
)


@pytest.mark.parametrize(
    ("idle", "connections"), [(3.9, 1), (4.99, 2)], ids=["reused", "dropped-before-5s"]
)
def test_an_idle_connection_is_dropped_before_a_provider_would_close_it(
    client: ProviderClient, monkeypatch: pytest.MonkeyPatch, idle: float, connections: int
) -> None:
    """The sync client (conformance checks, artifact pulls) keeps the async one's rule
    (decision 0500): a connection idle for 5 s is one uvicorn, Node or Apache closes, and a
    call written to it as it closes is reset unanswered; the pool reuses a connection only
    while it has been idle well under that. httpcore's own clock is moved by hand."""
    clock = [1000.0]
    monkeypatch.setattr(httpcore._sync.http11, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    with listener(_keep_alive) as provider:
        statuses = []
        for n in range(2):
            answer = client.execute(
                target(provider.url),
                idempotency_key=f"k-{n}",
                payload_bytes=b"{}",
                response_max_bytes=1024,
                timeout=5,
            )
            statuses.append(answer.status)
            clock[0] += idle
        assert provider.count() == connections
    assert statuses == [200, 200]


def test_the_request_head_is_exactly_the_platforms_every_header_in_order(
    client: ProviderClient,
) -> None:
    """Every byte of the blocking transport's head, pinned: the head httpx.Request writes (Host
    first, an empty POST's `Content-Length: 0` next, a body's last), with the fixed headers
    before a call's own, so a change in how the head is put together shows here."""
    captured: list[bytes] = []

    def script(conn: socket.socket, _: Listener) -> None:
        while True:
            request = read_request(conn)
            if not request:
                return
            captured.append(request)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    with listener(script) as provider:
        answers = [
            client.execute(
                target(provider.url),
                idempotency_key="inv_123:1",
                payload_bytes=b'{"n":1}',
                response_max_bytes=1024,
                timeout=5,
            ),
            client.get(target(provider.url), "/health/ready", with_credential=False, max_bytes=64),
            client.send(
                target(provider.url), "POST", "/v1/executions", credential=None, max_bytes=64
            ),
        ]
    assert [a.status for a in answers] == [200, 200, 200]
    host = provider.url.removeprefix("http://").encode()
    fixed = (
        b"Accept: application/json\r\nAccept-Encoding: identity\r\nConnection: keep-alive\r\n"
        b"User-Agent: python-httpx/" + httpx.__version__.encode() + b"\r\n"
    )
    assert captured == [
        b"POST /v1/executions HTTP/1.1\r\nHost: "
        + host
        + b"\r\n"
        + fixed
        + b"Authorization: Bearer "
        + SECRET.encode()
        + b"\r\nIdempotency-Key: inv_123:1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 19\r\n\r\n"
        b'{"payload":{"n":1}}',
        b"GET /health/ready HTTP/1.1\r\nHost: " + host + b"\r\n" + fixed + b"\r\n",
        b"POST /v1/executions HTTP/1.1\r\nHost: "
        + host
        + b"\r\nContent-Length: 0\r\n"
        + fixed
        + b"\r\n",
    ]
