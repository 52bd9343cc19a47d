"""The client over a real socket: a small stand-in server on 127.0.0.1, no platform.

The first attempt of an invoke loses its connection before any answer; the retry must carry the
same Idempotency-Key and the same body bytes through the real httpx transport.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mercato.client import AsyncMercatoClient, MercatoClient

API_KEY = "mercato_live_" + "L00pback" * 5
PATH = "/v1/services/acme.echo/versions/v1:invoke"


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str | None, str | None, bytes]] = []
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.seen.append(
                (self.headers["Idempotency-Key"], self.headers["Authorization"], body)
            )
            attempt = len(self.server.seen)
        if self.path != PATH or attempt == 1:
            self.close_connection = True  # the first attempt: connection lost, no answer
            return
        answer = json.dumps({"invocationId": "inv_1", "result": {"echo": json.loads(body)}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())


@pytest.fixture
def server() -> Iterator[StandIn]:
    standin = StandIn()
    thread = threading.Thread(target=standin.serve_forever, daemon=True)
    thread.start()
    yield standin
    standin.shutdown()
    standin.server_close()
    thread.join(timeout=10)


def _url(server: StandIn) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


def _assert_one_key_and_one_body(server: StandIn) -> None:
    assert len(server.seen) == 2
    (key1, auth1, body1), (key2, auth2, body2) = server.seen
    assert key1 and key1 == key2
    assert auth1 == auth2 == f"Bearer {API_KEY}"
    assert body1 == body2 == b'{"text":"h\xc3\xa9"}'


def test_a_lost_connection_is_retried_with_the_same_key_and_bytes(server: StandIn) -> None:
    with MercatoClient(_url(server), API_KEY, sleep=lambda _seconds: None) as client:
        call = client.invoke("acme.echo", "v1", {"text": "hé"})
    assert call.invocation_id == "inv_1" and call.result == {"echo": {"text": "hé"}}
    _assert_one_key_and_one_body(server)


def test_the_async_client_does_the_same(server: StandIn) -> None:
    async def sleep(_seconds: float) -> None:
        return None

    async def call() -> object:
        async with AsyncMercatoClient(_url(server), API_KEY, sleep=sleep) as client:
            return await client.invoke("acme.echo", "v1", {"text": "hé"})

    result = asyncio.run(call())
    assert getattr(result, "result", None) == {"echo": {"text": "hé"}}
    _assert_one_key_and_one_body(server)
