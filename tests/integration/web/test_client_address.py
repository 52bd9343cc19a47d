"""The client address rule (decisions 0221, 0273): the forwarded header counts only when the
TCP peer is a trusted proxy, and then the right-most address that is not itself a trusted proxy
is the client — the same address for the login throttle, the request log line and every route.
Real loopback HTTP: the peer is chosen by binding the client to 127.0.0.x."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request
from sqlalchemy import func, select

from builders.invocations import ServerThread
from mercato.accounts.models import LoginAttempt
from mercato.core.logs import json_handler
from mercato.db.runtime import Runtime
from mercato.settings import Settings
from mercato.web.app import create_app

PROXY = "127.0.0.2"  # the trusted proxy's address in these tests
STRANGER = "127.0.0.3"  # an untrusted peer

Seen = dict[str, str | None]


class Logs(io.StringIO):
    """The JSON lines written so far, and a wait for a line the server writes after it sent
    its response (the request line is written once the response has gone)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Condition()

    def write(self, text: str) -> int:
        with self.written:
            count = super().write(text)
            self.written.notify_all()
        return count

    def lines(self) -> list[dict[str, Any]]:
        with self.written:
            return [json.loads(line) for line in self.getvalue().splitlines()]

    def request_line(self, request_id: str) -> dict[str, Any]:
        def found() -> list[dict[str, Any]]:
            return [
                line
                for line in self.lines()
                if line["request_id"] == request_id and line["msg"] == "request"
            ]

        with self.written:
            assert self.written.wait_for(found, timeout=30), f"no request line for {request_id}"
        (line,) = found()
        return line


@pytest.fixture
def logs() -> Iterator[Logs]:
    stream = Logs()
    handler = json_handler(stream)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(previous)


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start a real server trusting `trusted` (MERCATO_TRUSTED_PROXIES); returns its URL."""
    stack: list[tuple[ServerThread, Runtime]] = []

    def start(trusted: str) -> str:
        settings = Settings(
            env="dev", data_dir=tmp_path, database_url=db_url, trusted_proxies=trusted
        )
        runtime = Runtime.from_settings(settings)
        app = create_app(runtime)

        @app.get("/test/whoami")
        async def whoami(request: Request) -> Seen:
            return {
                "client": request.client.host if request.client else None,
                "scheme": request.url.scheme,
            }

        server = ServerThread(app).__enter__()
        stack.append((server, runtime))
        return server.url

    yield start
    for server, runtime in stack:
        server.__exit__(None, None, None)
        runtime.db.dispose()


def _ask(url: str, peer: str, logs: Logs, **headers: str) -> tuple[Seen, Seen]:
    """(what the route saw, what the request log line said) for one request from `peer`."""
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=30) as client:
        response = client.get(f"{url}/test/whoami", headers=headers)
    assert response.status_code == 200, response.text
    logged = logs.request_line(response.headers["x-request-id"])
    seen: Seen = response.json()
    return seen, {"client": logged["client"]}


def test_an_untrusted_peer_cannot_claim_another_address(
    serve: Callable[[str], str], logs: Logs
) -> None:
    url = serve(PROXY)
    seen, logged = _ask(
        url, STRANGER, logs, **{"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Proto": "https"}
    )
    assert seen == {"client": STRANGER, "scheme": "http"}
    assert logged == {"client": STRANGER}


def test_nothing_is_trusted_when_the_list_is_empty(serve: Callable[[str], str], logs: Logs) -> None:
    url = serve("")
    seen, logged = _ask(url, PROXY, logs, **{"X-Forwarded-For": "198.51.100.7"})
    assert seen["client"] == PROXY and logged == {"client": PROXY}


def test_a_trusted_proxy_gives_the_client_address_and_scheme(
    serve: Callable[[str], str], logs: Logs
) -> None:
    url = serve(PROXY)
    seen, logged = _ask(
        url, PROXY, logs, **{"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Proto": "https"}
    )
    assert seen == {"client": "198.51.100.7", "scheme": "https"}
    assert logged == {"client": "198.51.100.7"}


def test_several_hops_give_the_right_most_untrusted_address(
    serve: Callable[[str], str], logs: Logs
) -> None:
    # A client forged the left-most entry; an inner proxy (10.0.0.0/8, trusted) forwarded it.
    # A network written with host bits set is accepted and matched as its network.
    url = serve(f"{PROXY},10.1.2.3/8")
    chain = "203.0.113.66, 198.51.100.7, 10.0.0.5"
    seen, logged = _ask(url, PROXY, logs, **{"X-Forwarded-For": chain})
    assert seen["client"] == "198.51.100.7" and logged == {"client": "198.51.100.7"}
    # Two header lines are one list, in order.
    transport = httpx.HTTPTransport(local_address=PROXY)
    with httpx.Client(transport=transport, timeout=30) as client:
        split = client.get(
            f"{url}/test/whoami",
            headers=[("X-Forwarded-For", "203.0.113.66"), ("X-Forwarded-For", "198.51.100.8")],
        )
    assert split.json()["client"] == "198.51.100.8"


def test_the_login_throttle_counts_the_same_address(
    serve: Callable[[str], str], logs: Logs, db_url: str, tmp_path: Path
) -> None:
    url = serve(PROXY)
    transport = httpx.HTTPTransport(local_address=PROXY)
    body = {"email": "nobody@example.com", "password": "not the password"}
    logged = []
    with httpx.Client(transport=transport, timeout=30) as client:
        for _ in range(2):
            response = client.post(
                f"{url}/v1/auth/login", json=body, headers={"X-Forwarded-For": "198.51.100.7"}
            )
            assert response.status_code == 401
            logged.append(logs.request_line(response.headers["x-request-id"]))
    assert [(line["route"], line["client"]) for line in logged] == [
        ("/v1/auth/login", "198.51.100.7")
    ] * 2
    # The failures were counted against the forwarded address, not the proxy's.
    settings = Settings(env="dev", data_dir=tmp_path, database_url=db_url)
    runtime = Runtime.from_settings(settings)
    try:
        with runtime.db.read() as session:
            counted = {
                address: session.scalar(
                    select(func.count())
                    .select_from(LoginAttempt)
                    .where(LoginAttempt.subject == _address_subject(address, settings))
                )
                for address in ("198.51.100.7", PROXY)
            }
    finally:
        runtime.db.dispose()
    assert counted == {"198.51.100.7": 2, PROXY: 0}


def _address_subject(address: str, settings: Settings) -> str:
    from mercato.accounts import service

    return service.login_subjects(
        email="x@example.com", client_ip=address, settings=settings
    ).address
