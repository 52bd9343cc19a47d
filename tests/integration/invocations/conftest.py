"""Fixtures for invocation tests (the world itself is in builders.invocation_world)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider


@pytest.fixture
def world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    with running_world(db_url, tmp_path, provider) as built:
        yield built
