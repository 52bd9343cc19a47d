"""The edge layer: one ASGI layer for everything an HTTP request passes before a route answers.

It sits inside uvicorn's `ProxyHeadersMiddleware` (so the client address it sees is the
trusted-proxy rule's, decision 0221) and does, in this order:

1. the request context (`web.observe.RequestLog`): a request id, echoed in `X-Request-Id` and
   set in `request_id_var` while the request is served; once it is answered, the HTTP and
   invoke counters and the request's log line (an exception out of the app is counted and
   logged as a 500, then goes on to the outermost handler, which renders it);
2. the body caps (`web.limits.limited`): a declared `Content-Length` over the cap is refused,
   a body streaming past it is cut off;
3. the edge checks (`web.edge.checked`): two `Authorization` headers, U+0000 anywhere;
4. the invoke route served directly (`web.direct.DirectRoute`), or else the router.

These were four middlewares. A coroutine frame stays on the stack for as long as the request
runs and is resumed on every await of it (each database round trip, the provider call); one
frame instead of four, with the checks done inline or by coroutines that return before the
route runs, is the same behaviour for less CPU per request (issue 20, decision 0382).
"""

from __future__ import annotations

import time

from fastapi.routing import RouteContext
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mercato.core.errors import MercatoError
from mercato.core.ids import SYSTEM_IDS, Ids
from mercato.core.logs import request_id_var
from mercato.web import problems
from mercato.web.direct import DirectRoute
from mercato.web.edge import checked
from mercato.web.limits import limited
from mercato.web.observe import REQUEST_ID_HEADER, RequestLog

_REQUEST_ID_NAME = REQUEST_ID_HEADER.lower().encode("latin-1")


class Front:
    """ASGI middleware: the request context, the body caps, the edge checks and the invoke
    route, in that order (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, route: RouteContext, ids: Ids = SYSTEM_IDS) -> None:
        self.app = app
        self.requests = RequestLog(ids)
        self.direct = DirectRoute(route)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        requests = self.requests
        request_id = requests.request_id(scope)
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500
        echoed = (_REQUEST_ID_NAME, request_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message["headers"]
                for name, _value in headers:  # a loop, not `any` over a generator
                    if name == _REQUEST_ID_NAME:
                        MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
                        break
                else:  # what MutableHeaders does when the answer has no such header yet
                    message["headers"] = [*headers, echoed]
            await send(message)

        try:
            refusal, receive = limited(scope, receive)
            if refusal is None:
                refusal, receive = await checked(scope, receive)
            if refusal is not None:
                await refusal(scope, receive, send_with_id)
            elif (params := self.direct.enter(scope)) is not None:
                # The route's own answer, or its error's problem document (web/direct.py);
                # any other exception goes out to the outermost 500 handler.
                response: Response
                request = Request(scope, receive, send_with_id)
                try:
                    response = await self.direct.endpoint(request=request, **params)
                except MercatoError as error:
                    response = problems.from_error(error)
                except HTTPException as error:  # the body cap, raised from `receive`
                    response = problems.from_http_exception(error)
                await response(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        except Exception:
            # Rendered as a 500 problem by the outermost middleware; keep the id for its log.
            requests.record(scope, 500, started)
            raise
        requests.record(scope, status, started)
        request_id_var.reset(token)
