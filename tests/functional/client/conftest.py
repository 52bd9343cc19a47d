"""A real platform per test (both backends): serve + SDK echo provider + seeded caller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.client_platform import Platform, build_platform


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    world = build_platform(db_url, tmp_path)
    try:
        yield world
    finally:
        world.stop()
        world.provider.stop()
        world.runtime.db.dispose()
