"""Request body caps at the edge (OWASP API4), before any route reads a byte too many.

The invoke route may carry up to the largest `requestMaxBytes` a contract can state (the
version's own limit is then checked by the invocation flow: 413 before anything is consumed);
every other route takes at most `MAX_BODY_BYTES`. A declared `Content-Length` over the cap is
refused at once; a body that streams past it (chunked, or lying) is cut off as soon as it does.
Both answers are 413 `REQUEST_TOO_LARGE` problem documents. See
docs/decisions/0180-request-body-caps.md.
"""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Message, Receive, Scope

from mercato.catalog.contracts import MAX_BODY_LIMIT
from mercato.web.problems import problem_response

MAX_BODY_BYTES = 1024 * 1024
MCP_BODY_BYTES = MAX_BODY_LIMIT + 64 * 1024
_INVOKE = re.compile(r"^/v1/services/[^/]+/versions/[^/]+:invoke$")


def body_cap(path: str) -> int:
    """The most bytes a request to `path` may carry (`/mcp`: a `tools/call` carries an invoke's
    body in its JSON-RPC envelope)."""
    if path == "/mcp":
        return MCP_BODY_BYTES
    return MAX_BODY_LIMIT if _INVOKE.match(path) else MAX_BODY_BYTES


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the cap; rendered as a 413 problem."""

    def __init__(self, cap: int) -> None:
        super().__init__(413, f"The request body is larger than {cap} bytes.")


def limited(scope: Scope, receive: Receive) -> tuple[Response | None, Receive]:
    """The refusal of a request whose declared `Content-Length` breaks `body_cap` (or is not a
    number), else None and a `receive` that raises `BodyTooLarge` once the body streams past
    the cap. Called by the edge layer (web/front.py) for every HTTP request."""
    cap = body_cap(scope.get("path", ""))
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            declared = value.decode("latin-1").strip()
            if not declared.isdigit() or int(declared) > cap:
                message = f"The request body is larger than {cap} bytes."
                if not declared.isdigit():
                    message = "Content-Length is not a number."
                status = 413 if declared.isdigit() else 400
                code = "REQUEST_TOO_LARGE" if status == 413 else "BAD_REQUEST"
                title = "Request body too large" if status == 413 else "Bad request"
                response = problem_response(
                    status, code, title, message, headers={"Connection": "close"}
                )
                return response, receive
    received = 0

    async def capped_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > cap:
                raise BodyTooLarge(cap)
        return message

    return None, capped_receive
