"""RFC 9457 problem documents: the one place errors become HTTP responses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from mercato.core.errors import MercatoError

log = logging.getLogger("mercato.web")

PROBLEM_MEDIA_TYPE = "application/problem+json"
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


def problem_response(
    status: int,
    code: str,
    title: str,
    message: str,
    *,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Build one problem document response."""
    body: dict[str, Any] = {
        "type": f"https://mercato.dev/problems/{code.lower().replace('_', '-')}",
        "title": title,
        "status": status,
        "code": code,
        "message": message,
    }
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def from_error(error: MercatoError) -> JSONResponse:
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
        400,
        "INVALID_REQUEST",
        "The request is not valid",
        "The request body or parameters are not valid.",
        extra={"errors": errors},
    )


def from_http_exception(exc: StarletteHTTPException) -> JSONResponse:
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
