"""`DirectRoute` (decision 0381), served by the edge layer `Front` (decision 0382): a qualifying
route served past FastAPI's router after the edge's own checks, and everything else left to the
app as before."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.responses import Response

from mercato.core.errors import Unauthenticated
from mercato.web import problems
from mercato.web.direct import DirectRoute, qualifies, route_of
from mercato.web.front import Front
from mercato.web.limits import BodyTooLarge

router = APIRouter(prefix="/v1")
seen: dict[str, Any] = {}


@router.post("/things/{name}:poke")
async def poke(name: str, request: Request) -> Response:
    seen["route"] = getattr(request.scope.get("route"), "path", None)
    seen["scope"] = {key: request.scope.get(key) for key in ("route", "endpoint", "path_params")}
    body = await request.body()
    if body == b"unauthenticated":
        raise Unauthenticated("Who are you?")
    if body == b"too-large":
        raise BodyTooLarge(10)
    if body == b"boom":
        raise RuntimeError("boom")
    if body == b"own-id":  # an answer naming a request id of its own, twice
        own = Response("own", headers={"X-Request-Id": "mine"})
        own.raw_headers.append((b"x-request-id", b"again"))
        return own
    return Response(f"{name}:{request.path_params['name']}:{body.decode()}")


@router.get("/things/{name}:poke")
async def peek(name: str) -> Response:
    return Response(f"peek {name}")


def _caller() -> str:
    return "caller"


@router.post("/with-dependency")
async def with_dependency(who: Annotated[str, Depends(_caller)]) -> Response:
    return Response(who)


def _app() -> FastAPI:
    app = FastAPI()
    problems.install(app)
    app.include_router(router)
    app.add_middleware(Front, route=route_of(app.routes, poke))
    return app


def _routed_app() -> FastAPI:
    """The same app without the edge layer: every request through FastAPI's router."""
    app = FastAPI()
    problems.install(app)
    app.include_router(router)
    return app


def _post(
    path: str,
    body: bytes,
    method: str = "POST",
    headers: list[tuple[str, str]] | None = None,
    app: FastAPI | None = None,
    root_path: str = "",
) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(
            app=app or _app(), raise_app_exceptions=False, root_path=root_path
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.request(method, path, content=body, headers=headers)

    return asyncio.run(call())


def test_the_route_is_served_with_its_path_parameters_and_scope_route() -> None:
    seen.clear()
    answer = _post("/v1/things/a%20b:poke", b"hello")
    assert (answer.status_code, answer.text) == (200, "a b:a b:hello")
    assert seen["route"] == "/v1/things/{name}:poke"  # the prefix is the included router's


@pytest.mark.parametrize("root_path", ["", "/api"])
@pytest.mark.parametrize(
    "body", [b"hello", b"unauthenticated", b"too-large", b"own-id"], ids=lambda b: b.decode()
)
def test_the_direct_answer_and_scope_are_the_routers(body: bytes, root_path: str) -> None:
    """What keeps the route served directly true (decision 0577): FastAPI's router and
    handler, given the same request, set the same scope and send the same answer (but the
    request id the edge layer adds). Fails when FastAPI or Starlette change either."""

    def answer(app: FastAPI | None) -> tuple[int, bytes, list[tuple[bytes, bytes]], Any]:
        seen.clear()
        got = _post(root_path + "/v1/things/a%20b:poke", body, app=app, root_path=root_path)
        raw = [(k, v) for k, v in got.headers.raw if k.lower() != b"x-request-id"]
        return got.status_code, got.content, raw, seen.get("scope")

    direct = answer(None)
    assert direct == answer(_routed_app())
    assert direct[3]["path_params"] == {"name": "a b"}


def test_its_errors_are_the_app_s_problem_documents() -> None:
    refused = _post("/v1/things/x:poke", b"unauthenticated")
    assert refused.status_code == 401
    assert refused.headers["content-type"] == problems.PROBLEM_MEDIA_TYPE
    assert refused.json()["code"] == "UNAUTHENTICATED"
    capped = _post("/v1/things/x:poke", b"too-large")
    assert (capped.status_code, capped.json()["code"]) == (413, "REQUEST_TOO_LARGE")


def test_the_edge_answers_before_the_route_and_every_answer_carries_the_request_id() -> None:
    served = _post("/v1/things/x:poke", b"hi", headers=[("X-Request-Id", "req-direct-1")])
    assert (served.status_code, served.headers["X-Request-Id"]) == (200, "req-direct-1")
    seen.clear()
    twice = [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
    ambiguous = _post("/v1/things/x:poke", b"hi", headers=twice)
    assert (ambiguous.status_code, ambiguous.json()["code"]) == (400, "AMBIGUOUS_CREDENTIALS")
    assert ambiguous.headers["X-Request-Id"].startswith("req_")
    nul = _post("/v1/things/x:poke", b'{"a": "\\u0000"}')
    assert (nul.status_code, nul.json()["code"]) == (400, "INVALID_TEXT")
    declared = _post("/v1/things/x:poke", b"hi", headers=[("Content-Length", "9999999")])
    assert (declared.status_code, declared.json()["code"]) == (413, "REQUEST_TOO_LARGE")
    assert seen == {}  # the route never ran


def test_an_unexpected_error_still_reaches_the_500_handler() -> None:
    answer = _post("/v1/things/x:poke", b"boom")
    assert answer.status_code == 500
    assert answer.json()["code"] == "INTERNAL_ERROR"


def test_other_methods_and_paths_go_to_the_router() -> None:
    assert _post("/v1/things/x:poke", b"", method="GET").text == "peek x"
    assert _post("/v1/things/x:poke", b"", method="PUT").status_code == 405
    assert _post("/v1/things/x", b"").status_code == 404
    assert _post("/v1/with-dependency", b"").text == "caller"


def test_a_route_with_dependencies_or_parameters_it_would_not_get_does_not_qualify() -> None:
    app = FastAPI()
    app.include_router(router)
    dependent = route_of(app.routes, with_dependency)
    assert not qualifies(dependent.original_route)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DirectRoute(dependent)
    assert qualifies(route_of(app.routes, poke).original_route)  # type: ignore[arg-type]


def test_the_product_invoke_route_qualifies() -> None:
    from mercato.web.api import invocations

    app = FastAPI()
    app.include_router(invocations.router)
    assert qualifies(route_of(app.routes, invocations.invoke).original_route)  # type: ignore[arg-type]


def test_the_request_id_is_the_last_header_or_replaces_the_answer_s_own() -> None:
    sent = [("X-Request-Id", "req-given")]
    plain = _post("/v1/things/x:poke", b"hello", headers=sent).headers.raw
    assert plain[-1] == (b"x-request-id", b"req-given")
    assert [name for name, _ in plain].count(b"x-request-id") == 1
    own = _post("/v1/things/x:poke", b"own-id", headers=sent).headers.raw
    # as starlette's MutableHeaders sets it: the first one replaced in place, the others gone
    assert own[0] == (b"x-request-id", b"req-given")
    assert [name for name, _ in own].count(b"x-request-id") == 1
