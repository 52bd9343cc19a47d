"""Checks every HTTP request passes at the edge, before any route reads or writes (DESIGN.md §5).

- More than one `Authorization` header is an ambiguous credential: 400 `AMBIGUOUS_CREDENTIALS`.
- U+0000 is text no store can hold (PostgreSQL refuses it): in a header, a query parameter, the
  body (a JSON string or member name at any depth, a form field) it is 400 `INVALID_TEXT`, in a
  path segment 404 `INVALID_TEXT`; the problem names the field (`field`) and where it is (`in`).

The hot path pays byte scans only: a body is parsed here only when its bytes can hold a NUL
(a `\\u0000` escape in JSON, `%00` or a NUL byte in a form), and the refusal then re-reads it
to name the field. See docs/decisions/0215-nul-refused-at-the-edge.md and
0216-two-authorization-headers.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope

from mercato.core.errors import AmbiguousCredentials, InvalidText
from mercato.web import problems

NUL = "\x00"
_JSON_NUL = b"\\u0000"
_FORM_NUL = (b"%00", b"\x00")
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})
_MAX_NAME = 200
# The scans below use `bytes.find`, not `in`: `part in data` first tries `part` as an int and,
# for bytes, raises and clears a TypeError inside CPython (about 2,000 instructions a check,
# over a dozen checks a request).


def shown(name: str) -> str:
    """`name` as a problem may echo it: a NUL written as `\\u0000`, at most 200 characters."""
    return name.replace(NUL, "\\u0000")[:_MAX_NAME]


def json_pointer(path: tuple[str | int, ...]) -> str:
    """The RFC 6901 pointer of `path` (as REQUEST_SCHEMA_VIOLATION names members)."""
    return "".join("/" + shown(str(p).replace("~", "~0").replace("/", "~1")) for p in path)


def nul_in_json(document: Any) -> tuple[str | int, ...] | None:
    """The path of the first member name or string holding U+0000, in document order."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), document)]
    while stack:  # iterative: a document may nest as deep as the parser allows
        path, node = stack.pop()
        if isinstance(node, str):
            if NUL in node:
                return path
        elif isinstance(node, dict):
            for key in node:
                if NUL in key:
                    return (*path, key)
            stack.extend(((*path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))
    return None


def nul_in_pairs(pairs: Iterator[tuple[str, Any]]) -> str | None:
    """The first name whose name or text value holds U+0000."""
    for name, value in pairs:
        if NUL in name or (isinstance(value, str) and NUL in value):
            return name
    return None


# --- the refusals ------------------------------------------------------------------------


def invalid_text(status: int, where: str, field: str) -> Response:
    """The INVALID_TEXT problem for `field` in `where` (path, query, header or body)."""
    message = f"The {where} field {field!r} holds U+0000 (NUL), which cannot be stored."
    error = InvalidText(message, field=field, **{"in": where})
    if status == 404:  # a path segment names an object, and no object has such a name
        return problems.problem_response(
            404, error.code, error.title, error.message, extra=error.extra
        )
    return problems.from_error(error)


def head_refusal(scope: Scope) -> Response | None:
    """The refusal of the request line and headers, or None when they are clean."""
    headers = scope["headers"]
    authorizations = 0
    parts: list[bytes] = []
    for name, value in headers:
        if name == b"authorization":
            authorizations += 1
        parts.append(name)
        parts.append(value)
    # One scan of all the names and values (decision 0499): a NUL is in one of them exactly
    # when it is in their concatenation; only then are they scanned one by one, for the first
    # header holding one, as before.
    try:
        clean = b"".join(parts).find(b"\x00") == -1
    except TypeError:
        clean = False
    if not clean:
        for name, value in headers:
            if value.find(b"\x00") != -1 or name.find(b"\x00") != -1:
                return invalid_text(400, "header", shown(name.decode("latin-1")))
    if authorizations > 1:
        return problems.from_error(AmbiguousCredentials("Send exactly one Authorization header."))
    if NUL in scope["path"]:
        return invalid_text(404, "path", _path_parameter(scope))
    query: bytes = scope["query_string"]
    if query.find(b"%00") != -1 or query.find(b"\x00") != -1:  # _FORM_NUL, no generator
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        name = nul_in_pairs(iter(pairs))
        if name is not None:
            return invalid_text(400, "query", shown(name))
    return None


def _path_parameter(scope: Scope) -> str:
    """The name of the route's path parameter that holds the NUL ('path' when none does)."""
    found = _route_of(scope)
    if found is not None:
        for name, value in found[1].items():
            if NUL in value:
                return name
    return "path"


def _route_of(scope: Scope) -> tuple[Any, dict[str, str]] | None:
    """The route that would serve `scope` and its path parameters, if a route would."""
    path, method = scope["path"], scope["method"]
    for context in iter_route_contexts(getattr(scope.get("app"), "routes", ())):
        regex = getattr(context, "path_regex", None)
        found = regex.match(path) if regex is not None else None
        if found is not None and method in (context.methods or (method,)):
            return context.original_route, found.groupdict()
    return None


async def body_refusal(scope: Scope, body: bytes) -> Response | None:
    """The refusal of a request body holding U+0000, or None."""
    if body.find(_JSON_NUL) != -1:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            document = None  # not JSON: the route refuses it as it would any other such body
        path = nul_in_json(document)
        if path is not None:
            return invalid_text(400, "body", json_pointer(path))
    # The body's bytes first (two scans, no generator): the Content-Type is looked for only
    # when they could hold a NUL (decision 0476).
    if (body.find(b"%00") != -1 or body.find(b"\x00") != -1) and _header(
        scope, b"content-type"
    ).startswith(_FORM_TYPES):
        name = await _nul_in_form(scope, body)
        if name is not None:
            return invalid_text(400, "body", shown(name))
    return None


async def _nul_in_form(scope: Scope, body: bytes) -> str | None:
    """The first form field holding U+0000, parsed as the route would parse it."""
    request = Request(scope, Replayed(body, [{"type": "http.request", "body": body}], _never))
    try:
        form = await request.form()
    except Exception:  # a malformed form: the route refuses it as it would any other
        return None
    try:
        return nul_in_pairs(iter(form.multi_items()))
    finally:
        await form.close()


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1")).lower()
    return ""


# --- the body, read once ----------------------------------------------------------------


async def _never() -> Message:
    raise RuntimeError("the body was already read")


class Replayed:
    """A `receive` that hands out `messages` first, then the server's own; `body`
    is the whole body they carry (what the edge checks read), None when the client left
    before it ended (a reader meets the disconnect)."""

    __slots__ = ("body", "pending", "receive")

    def __init__(self, body: bytes | None, messages: list[Message], receive: Receive) -> None:
        self.body = body
        self.pending = list(messages)
        self.receive = receive

    async def __call__(self) -> Message:
        if self.pending:
            return self.pending.pop(0)
        return await self.receive()


async def body_of(request: Request) -> bytes:
    """The request's whole body: the one the edge checks read when they did (`checked`), else
    read as `request.body()` reads it. Reading it from the edge's `Replayed` leaves its
    messages in place, so a later `request.body()` still gets the same bytes."""
    receive = request.receive
    if isinstance(receive, Replayed) and receive.body is not None:
        return receive.body
    return await request.body()


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The whole body and the messages it came in (stopping at a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    collected: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if message["type"] != "http.request":
        collected = [{"type": "http.request", "body": body, "more_body": True}, message]
    return body, collected


async def checked(scope: Scope, receive: Receive) -> tuple[Response | None, Receive]:
    """The refusal of an HTTP request (see the module docstring), else None; and the `receive`
    the app reads the body from (the body is read here, then handed out again).

    Called by the edge layer (web/front.py) after the body caps, so the body it reads is
    already capped; the cap's own refusal names no route, as a request refused before
    routing."""
    refusal = head_refusal(scope)
    if refusal is None and scope["method"] not in _BODYLESS:
        try:
            body, messages = await _read_body(receive)
        except HTTPException as exc:  # the body cap (web/limits.py)
            return problems.from_http_exception(exc), receive
        refusal = await body_refusal(scope, body)
        receive = Replayed(body if len(messages) == 1 else None, messages, receive)
    if refusal is not None:
        found = _route_of(scope)  # so that the request's metrics and log name its route
        scope["route"] = found[0] if found is not None else None
    return refusal, receive
