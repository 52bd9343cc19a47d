"""RFC 9457 problem documents: the one place errors become HTTP responses, and the one place a
route's declared error classes become its documented problem answers (`declare`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from mercato.core.errors import (
    AmbiguousCredentials,
    BadRequest,
    InvalidText,
    MercatoError,
    Unauthenticated,
)
from mercato.quotas.errors import RateLimitExceeded

log = logging.getLogger("mercato.web")

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_CODE = "problem_code"  # scope["state"] member: the code of the problem answered
_HTTP_CODES = {
    400: ("BAD_REQUEST", "Bad request"),
    401: ("UNAUTHENTICATED", "Authentication required"),
    403: ("FORBIDDEN", "Not allowed"),
    404: ("NOT_FOUND", "Not found"),
    405: ("METHOD_NOT_ALLOWED", "Method not allowed"),
    406: ("NOT_ACCEPTABLE", "Not acceptable"),
    413: ("REQUEST_TOO_LARGE", "Request body too large"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "Unsupported media type"),
}


class InvalidRequest(BadRequest):
    """The body or parameters do not fit the route's declaration (rendered from FastAPI's
    RequestValidationError by `_validation_error`)."""

    code = "INVALID_REQUEST"
    title = "The request is not valid"


class ProblemDocument(BaseModel):
    """RFC 9457 problem details; members beyond these depend on the code."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="A URI naming the problem type.")
    title: str
    status: int
    code: str = Field(description="Stable upper-snake error code; branch on this.")
    message: str = Field(description="Human-readable explanation of this occurrence.")


class RateLimitProblem(ProblemDocument):
    """The 429 body of spec 2.7 (a problem document with the quota's members)."""

    policy: str = Field(description="Current policy name.")
    limit: int = Field(description="Calls allowed per window.")
    windowSeconds: int = Field(description="Window length.")
    retryAfter: int = Field(description="Suggested wait in seconds; equals Retry-After.")


# Every request passes web/edge.py first: U+0000 in a header, query or body is a 400, in a path
# segment a 404 (decision 0215); two Authorization headers are a 400 (decision 0216).
EDGE_ERRORS: tuple[type[MercatoError], ...] = (InvalidText, AmbiguousCredentials)
_PROBLEM_MODELS: dict[type[MercatoError], type[ProblemDocument]] = {
    RateLimitExceeded: RateLimitProblem
}
BEARER: dict[str, Any] = {"security": [{"bearer": []}]}
QUOTA_HEADERS = ("RateLimit-Policy", "RateLimit")


def _header_docs(names: tuple[str, ...]) -> dict[str, Any]:
    return {name: {"schema": {"type": "string"}} for name in names}


def declare(
    *errors: type[MercatoError],
    path_params: bool = False,
    headers: Mapping[int, tuple[str, ...]] | None = None,
    auth: bool | None = None,
    answers: Mapping[int | str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The `responses` (and `openapi_extra`) of a route that can raise `errors`.

    Codes are grouped by the classes' own statuses, so a status is never written twice; the
    edge's errors are added to every route (and a 404 INVALID_TEXT where the path has
    parameters). A route raising Unauthenticated is marked as needing the bearer credential.
    Error answers are documented as `application/problem+json` by `web.openapi`. `answers`
    adds success answers (other statuses, headers) to the route's `response_model` one.
    """
    classes = list(dict.fromkeys((*errors, *EDGE_ERRORS)))
    by_status: dict[int, list[type[MercatoError]]] = {}
    for cls in classes:
        by_status.setdefault(cls.status, []).append(cls)
    if path_params:
        by_status.setdefault(404, []).append(InvalidText)
    responses: dict[int | str, dict[str, Any]] = {**(answers or {})}
    for status in sorted(by_status):
        group = by_status[status]
        models = {_PROBLEM_MODELS.get(c, ProblemDocument) for c in group}
        model = RateLimitProblem if RateLimitProblem in models else ProblemDocument
        entry: dict[str, Any] = {
            "model": model,
            "description": "Problem codes: " + ", ".join(f"`{c.code}`" for c in group) + ".",
        }
        names = (headers or {}).get(status, ())
        if status == 401:
            names = ("WWW-Authenticate", *names)
        if names:
            entry["headers"] = _header_docs(names)
        responses[status] = entry
    declared: dict[str, Any] = {"responses": responses}
    needs_auth = auth if auth is not None else any(issubclass(c, Unauthenticated) for c in classes)
    if needs_auth:
        declared["openapi_extra"] = dict(BEARER)
    return declared


def success_headers(*names: str) -> dict[str, Any]:
    """Documented response headers of a success answer."""
    return _header_docs(names)


class ProblemResponse(JSONResponse):
    """A problem document that notes its `code` on the request's state as it is sent, so the
    request log and metrics (web/observe.py) never read a response body."""

    media_type = PROBLEM_MEDIA_TYPE

    def __init__(self, body: dict[str, Any], *, headers: dict[str, str] | None = None) -> None:
        super().__init__(body, status_code=int(body["status"]), headers=headers)
        self.code = str(body["code"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})[PROBLEM_CODE] = self.code
        await super().__call__(scope, receive, send)


def problem_response(
    status: int,
    code: str,
    title: str,
    message: str,
    *,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> ProblemResponse:
    """Build one problem document response."""
    return ProblemResponse(_document(status, code, title, message, extra), headers=headers)


def _document(
    status: int, code: str, title: str, message: str, extra: dict[str, Any] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"https://mercato.dev/problems/{code.lower().replace('_', '-')}",
        "title": title,
        "status": status,
        "code": code,
        "message": message,
    }
    if extra:
        body.update(extra)
    return body


def error_document(error: MercatoError) -> dict[str, Any]:
    """The problem document `from_error` answers for `error`, as a mapping (the MCP endpoint
    carries it in a tool result)."""
    return _document(error.status, error.code, error.title, error.message, error.extra)


def from_error(error: MercatoError) -> ProblemResponse:
    return problem_response(
        error.status,
        error.code,
        error.title,
        error.message,
        extra=error.extra,
        headers=error.headers or None,
    )


async def _mercato_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MercatoError)
    return from_error(exc)


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"location": [str(p) for p in err.get("loc", ())], "detail": str(err.get("msg", ""))}
        for err in exc.errors()
    ]
    return problem_response(
        InvalidRequest.status,
        InvalidRequest.code,
        InvalidRequest.title,
        "The request body or parameters are not valid.",
        extra={"errors": errors},
    )


def from_http_exception(exc: StarletteHTTPException) -> ProblemResponse:
    """The problem document of a framework HTTP exception (404, 405, 413, ...)."""
    code, title = _HTTP_CODES.get(exc.status_code, ("HTTP_ERROR", "HTTP error"))
    message = exc.detail if isinstance(exc.detail, str) else title
    headers = dict(exc.headers) if exc.headers else None
    return problem_response(exc.status_code, code, title, message, headers=headers)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return from_http_exception(exc)


async def _unexpected_error(_request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return problem_response(500, "INTERNAL_ERROR", "Internal error", "Something went wrong.")


def install(app: FastAPI) -> None:
    """Register the problem handlers on `app`."""
    app.add_exception_handler(MercatoError, _mercato_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
