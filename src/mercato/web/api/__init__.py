"""JSON API routers, included in this order."""

from __future__ import annotations

from fastapi import APIRouter

from mercato.web.api import (
    api_keys,
    artifacts,
    auth,
    balance,
    cases,
    catalog,
    health,
    invocations,
    provider,
    rate_limit,
)


def routers() -> list[APIRouter]:
    """Every API router, in inclusion order."""
    modules = (
        health,
        auth,
        api_keys,
        catalog,
        invocations,
        artifacts,
        balance,
        rate_limit,
        cases,
        provider,
    )
    return [module.router for module in modules]
