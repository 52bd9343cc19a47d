"""Integration fixtures: the ASGI app over a real database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from builders.invocations import ScriptedProvider, scripted_provider
from mercato.db.runtime import Runtime
from mercato.web.app import create_app


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    """A scripted provider on loopback (spec 4.2 endpoints with faults on demand)."""
    with scripted_provider() as running:
        yield running
