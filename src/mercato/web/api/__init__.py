"""JSON API routers, included in this order."""

from __future__ import annotations

import importlib

from fastapi import APIRouter

_ROUTER_MODULES = [
    "mercato.web.api.health",
    "mercato.web.api.auth",
    "mercato.web.api.api_keys",
    "mercato.web.api.catalog",
    "mercato.web.api.invocations",
    "mercato.web.api.artifacts",
    "mercato.web.api.balance",
    "mercato.web.api.rate_limit",
    "mercato.web.api.cases",
    "mercato.web.api.provider",
]


def routers() -> list[APIRouter]:
    """Import each router module that exists and return its `router`."""
    found: list[APIRouter] = []
    for name in _ROUTER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        found.append(module.router)
    return found
