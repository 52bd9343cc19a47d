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
from collections.abc import Awaitable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mercato.catalog.contracts import MAX_BODY_LIMIT
from mercato.web.problems import problem_response

MAX_BODY_BYTES = 1024 * 1024
_INVOKE = re.compile(r"^/v1/services/[^/]+/versions/[^/]+:invoke$")


def body_cap(path: str) -> int:
    """The most bytes a request to `path` may carry."""
    return MAX_BODY_LIMIT if _INVOKE.match(path) else MAX_BODY_BYTES


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the cap; rendered as a 413 problem."""

    def __init__(self, cap: int) -> None:
        super().__init__(413, f"The request body is larger than {cap} bytes.")


class BodyLimit:
    """ASGI middleware enforcing `body_cap` on every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine itself: it hands back the app's (or the refusal's), so that its frame
        # is not resumed on every await of the request (issue 20: CPU per invoke).
        if scope["type"] != "http":
            return self.app(scope, receive, send)
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
                    return response(scope, receive, send)
        received = 0

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    raise BodyTooLarge(cap)
            return message

        return self.app(scope, capped_receive, send)
