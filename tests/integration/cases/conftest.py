"""Fixtures for case tests: a scripted provider and the case world over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.cases import CaseWorld, add_people
from builders.invocation_world import running_world
from builders.invocations import ScriptedProvider


@pytest.fixture
def cw(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[CaseWorld]:
    with running_world(db_url, tmp_path, provider) as world:
        yield add_people(world)
