"""The platform's own liveness and readiness endpoints."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text

from mercato.core.errors import ServiceUnavailable
from mercato.web.deps import runtime_of

router = APIRouter(tags=["health"])


@router.get("/health/live")
def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
def ready(request: Request) -> dict[str, str]:
    try:
        with runtime_of(request).db.read() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:
        raise ServiceUnavailable("The database is not reachable.") from exc
    return {"status": "ok"}
