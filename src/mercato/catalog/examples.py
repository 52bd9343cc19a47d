"""Example contracts shipped with Mercato: the daily ranking's (the demo publishes it) and the
templates a new draft can start from."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

DAILY_RANKING_V1 = "daily_ranking_v1.json"
# The example request and result the demo publishes beside the daily ranking's v1 contract.
DAILY_RANKING_V1_EXAMPLES = "daily_ranking_v1.examples.json"
# The templates a provider may start a new draft from (the keys are what forms and the CLI use).
TEMPLATES = {"plain-json": "plain_json.json", "with-artifacts": "with_artifacts.json"}


def example_contract(name: str = DAILY_RANKING_V1) -> dict[str, Any]:
    """Return a fresh copy of a packaged example contract input."""
    package = resources.files("mercato.catalog.example_contracts")
    text = package.joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def daily_ranking_examples() -> list[dict[str, Any]]:
    """A fresh copy of the daily ranking v1's examples ([{"request", "result"}])."""
    package = resources.files("mercato.catalog.example_contracts")
    text = package.joinpath(DAILY_RANKING_V1_EXAMPLES).read_text(encoding="utf-8")
    loaded: list[dict[str, Any]] = json.loads(text)
    return loaded


def template_contract(name: str) -> dict[str, Any] | None:
    """A fresh copy of the template `name` (see TEMPLATES), or None for an unknown name."""
    file_name = TEMPLATES.get(name)
    return None if file_name is None else example_contract(file_name)
