"""The invoke route served directly, past FastAPI's router and dependency machinery.

The edge layer (web/front.py) serves it after the request context, the body caps and the edge
checks, which apply as to every request. A request the route matches in full (its own public
`matches`, as the router asks it) goes straight to the route's endpoint, with the path
parameters and the endpoint the match gives and the route set on the scope as the router would
set it (the metrics and the log name the route from it); the route's errors become problem
documents by the same functions the app's handlers call (`web.problems`). Anything else, an
unexpected exception included, goes where it went before: other requests to the router, an
unexpected exception out to the outermost 500 handler.

The route stays registered with FastAPI as before, so the OpenAPI document is the one its
declaration generates. It qualifies only when its endpoint is a coroutine taking its path
parameters and `request` and returning a `Response` (no dependencies, no body field, no
response model applied): what FastAPI itself would then do is call it and send that Response.
See docs/decisions/0381-invoke-served-directly.md and 0382-one-edge-layer.md.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.routing import Match
from starlette.types import Scope


def route_of(routes: Any, endpoint: object) -> RouteContext:
    """The route among `routes` (an app's, routers included) whose endpoint is `endpoint`."""
    for context in iter_route_contexts(routes):
        if getattr(context.original_route, "endpoint", None) is endpoint:
            return context
    raise LookupError(endpoint)


def qualifies(route: APIRoute) -> bool:
    """Whether `route` can be served directly with the same behaviour (see the module)."""
    dependant = route.dependant
    params = set(inspect.signature(route.endpoint).parameters)
    return (
        inspect.iscoroutinefunction(route.endpoint)
        and not dependant.dependencies
        and not dependant.body_params
        and not dependant.query_params
        and not dependant.header_params
        and not dependant.cookie_params
        and dependant.request_param_name == "request"
        and params == {p.name for p in dependant.path_params} | {"request"}
    )


class DirectRoute:
    """One qualifying route, which the edge layer (web/front.py) serves itself (see the
    module)."""

    def __init__(self, route: RouteContext) -> None:
        original = route.original_route
        if not isinstance(original, APIRoute) or not qualifies(original):
            raise ValueError(f"{route.path} cannot be served directly")
        self.route = original  # what the router sets as the scope's route
        self.context = route  # matches a request as the router matches it (prefixes and all)
        self.path_regex = route.path_regex  # the path as included (prefixes and all)
        self.convertors = route.param_convertors
        self.methods = frozenset(route.methods or ())
        self.endpoint: Any = original.endpoint

    def enter(self, scope: Scope) -> dict[str, Any] | None:
        """The path parameters of an HTTP request this route answers in full (its method, and
        its path with its convertors), with the route set on the scope as the router sets it;
        None for any other request. Without a root path (how `mercato serve` runs) the path is
        matched by the route's own public regex and convertors; under one, by the route's own
        `matches`, which knows how to strip it."""
        if scope["method"] not in self.methods:
            return None
        if scope.get("root_path"):
            match, child = self.context.matches(scope)
            if match is not Match.FULL:
                return None
            params: dict[str, Any] = child["path_params"]
        else:
            found = self.path_regex.match(scope["path"])
            if found is None:
                return None
            convertors = self.convertors
            params = {
                name: convertors[name].convert(value) for name, value in found.groupdict().items()
            }
        scope["route"] = self.route
        scope["endpoint"] = self.endpoint
        scope["path_params"] = params
        return params
