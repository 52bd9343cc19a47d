"""Import every domain's models so that the metadata is complete (migrations, tests)."""

from __future__ import annotations

import importlib

_MODEL_MODULES = [
    "mercato.accounts.models",
    "mercato.ledger.models",
    "mercato.providers.models",
    "mercato.catalog.models",
    "mercato.quotas.models",
    "mercato.invocations.models",
    "mercato.artifacts.models",
    "mercato.cases.models",
    "mercato.db.hints",
]


def load_all() -> None:
    for name in _MODEL_MODULES:
        importlib.import_module(name)  # by name: the domains sit above this layer
