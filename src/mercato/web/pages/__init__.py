"""The marketplace pages under `/`: server-rendered HTML over the same services as `/v1`."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from mercato.core.errors import MercatoError
from mercato.web import problems
from mercato.web.pages import account, auth, catalog, provider, receipts, staff
from mercato.web.pages.common import (
    CsrfRefused,
    LoginRequired,
    PageForbidden,
    login_redirect,
    render,
)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


_MODULES = (auth, catalog, account, receipts, provider, staff)
_PAGE_ENDPOINTS = {
    getattr(route, "endpoint", None) for module in _MODULES for route in module.router.routes
}


def _is_page(request: Request) -> bool:
    """Whether a page route handled the request (errors elsewhere stay problem documents)."""
    return request.scope.get("endpoint") in _PAGE_ENDPOINTS


def _is_page_address(request: Request) -> bool:
    """For addresses no route matched: anything outside the API and the operations paths."""
    path = request.url.path
    return not path.startswith(("/v1/", "/health", "/metrics"))


async def _login_required(request: Request, _exc: Exception) -> Response:
    return login_redirect(request)


async def _forbidden(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PageForbidden)
    return await run_in_threadpool(
        render, request, "error.html", status=403, title="Not allowed", message=exc.message
    )


async def _csrf(request: Request, _exc: Exception) -> Response:
    message = (
        "This form was not sent from a Mercato page (its security token is missing or stale). "
        "Go back, reload the page and try again."
    )
    return await run_in_threadpool(
        render, request, "error.html", status=403, title="Form refused", message=message
    )


async def _mercato_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MercatoError)
    if not _is_page(request):
        return problems.from_error(exc)
    return await run_in_threadpool(
        render, request, "error.html", status=exc.status, title=exc.title, message=exc.message
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if not (_is_page(request) or _is_page_address(request)) or exc.status_code not in (404, 405):
        return await problems._http_error(request, exc)
    title = "Page not found" if exc.status_code == 404 else "Not allowed here"
    message = "There is nothing at this address." if exc.status_code == 404 else str(exc.detail)
    return await run_in_threadpool(
        render, request, "error.html", status=exc.status_code, title=title, message=message
    )


def install(app: FastAPI) -> None:
    """Add the page routes, the static files and HTML error pages to the app."""
    for module in _MODULES:
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(PageForbidden, _forbidden)
    app.add_exception_handler(CsrfRefused, _csrf)
    app.add_exception_handler(MercatoError, _mercato_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
