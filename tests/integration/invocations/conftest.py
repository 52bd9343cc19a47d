"""Fixtures for invocation tests (the world itself is in builders.invocation_world)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.invocation_world import World, build_world
from builders.invocations import ScriptedProvider, scripted_provider


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with scripted_provider() as running:
        yield running


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    built = build_world(db_url, tmp_path, provider)
    yield built
    built.provider_client.close()
    built.runtime.db.dispose()
