"""Fixtures for invocation tests (the world itself is in builders.invocation_world)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider
from mercato.web.app import create_app


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider) as built:
        yield built


@pytest.fixture
def memoryless(world: World) -> Iterator[TestClient]:
    """The same app on the same database, keeping nothing in memory (decision 0400): the
    answers a call served from memory must equal (`world.invoke(..., client=memoryless)`)."""
    runtime = dataclasses.replace(world.runtime, hints=None)
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        yield client
