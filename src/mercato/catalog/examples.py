"""Example contracts shipped with Mercato (the demo publishes the daily ranking with one)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

DAILY_RANKING_V1 = "daily_ranking_v1.json"


def example_contract(name: str = DAILY_RANKING_V1) -> dict[str, Any]:
    """Return a fresh copy of a packaged example contract input."""
    package = resources.files("mercato.catalog.example_contracts")
    text = package.joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded
