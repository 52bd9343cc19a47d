"""The body the edge checks read is the one the invoke route gets, without a second read."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message

from mercato.web.edge import Replayed, body_of, checked

SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/services/a.b/versions/1.0.0:invoke",
    "query_string": b"",
    "headers": [(b"content-type", b"application/json")],
}


class Server:
    """A server's `receive`: the messages given, then nothing more may be asked."""

    def __init__(self, *messages: Message) -> None:
        self.messages = list(messages)
        self.asked = 0

    async def __call__(self) -> Message:
        self.asked += 1
        if not self.messages:
            raise AssertionError("the body was read from the server twice")
        return self.messages.pop(0)


def _edge(server: Server) -> Request:
    refusal, receive = asyncio.run(checked(dict(SCOPE), server))
    assert refusal is None
    return Request(dict(SCOPE), receive)


def test_the_route_gets_the_body_the_edge_read_in_chunks() -> None:
    server = Server(
        {"type": "http.request", "body": b'{"n":', "more_body": True},
        {"type": "http.request", "body": b" 1}", "more_body": False},
    )
    request = _edge(server)
    assert server.asked == 2
    assert asyncio.run(body_of(request)) == b'{"n": 1}'
    assert server.asked == 2  # not asked again
    replayed = request.receive
    assert isinstance(replayed, Replayed)
    assert len(replayed.pending) == 1  # taken as read, not handed out again
    # What it leaves is what a reader would have found: the same body, once more.
    assert asyncio.run(request.body()) == b'{"n": 1}'
    assert server.asked == 2


def test_a_client_gone_before_its_body_ended_is_met_as_a_reader_meets_it() -> None:
    server = Server(
        {"type": "http.request", "body": b'{"n":', "more_body": True},
        {"type": "http.disconnect"},
    )
    request = _edge(server)
    with pytest.raises(ClientDisconnect):
        asyncio.run(body_of(request))


def test_a_request_the_edge_did_not_read_is_read_as_usual() -> None:
    server = Server({"type": "http.request", "body": b"{}", "more_body": False})
    assert asyncio.run(body_of(Request(dict(SCOPE), server))) == b"{}"
    assert server.asked == 1
