"""Fixtures for case tests: a scripted provider and the case world over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.cases import CaseWorld, add_people
from builders.invocation_world import build_world
from builders.invocations import ScriptedProvider, scripted_provider


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with scripted_provider() as running:
        yield running


@pytest.fixture
def cw(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[CaseWorld]:
    world = build_world(db_url, tmp_path, provider)
    yield add_people(world)
    world.provider_client.close()
    world.runtime.db.dispose()
