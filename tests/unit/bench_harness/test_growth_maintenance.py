"""The growth measurement's maintenance on PostgreSQL (decision 0410): the empty store is
checkpointed before it is measured, not analyzed; the invocation rows the empty measurements
left dead are vacuumed before the bulk load (which then fills their space), and after it only
the grown tables are vacuumed, every table analyzed, then the checkpoint."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).parents[3]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    module = importlib.import_module("bench.harness")
    monkeypatch.setattr(module.os, "sync", lambda: None)
    return module


class _Driver:
    def __init__(self, sent: list[str]) -> None:
        self.sent = sent
        self.autocommit = False

    def rollback(self) -> None:
        pass

    def execute(self, statement: str) -> None:
        assert self.autocommit, "maintenance runs outside a transaction"
        self.sent.append(statement)


class _Result:
    def mappings(self) -> _Result:
        return self

    def one(self) -> dict[str, Any]:
        return {"id": "row"}

    def __iter__(self) -> Any:
        return iter(())


class _Conn:
    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def execute(self, _statement: object) -> _Result:
        return _Result()


def _runtime(sent: list[str]) -> Any:
    driver = _Driver(sent)
    raw = SimpleNamespace(driver_connection=driver, close=lambda: None)
    engine = SimpleNamespace(
        dialect=SimpleNamespace(name="postgresql"),
        raw_connection=lambda: raw,
        connect=_Conn,
    )
    return SimpleNamespace(db=SimpleNamespace(engine=engine))


def test_the_empty_store_is_checkpointed_not_analyzed_before_it_is_measured(
    harness: ModuleType,
) -> None:
    sent: list[str] = []
    harness.settle_before_measuring(_runtime(sent))
    assert sent == ["CHECKPOINT"]


def test_the_bulk_load_fills_the_vacuumed_invocations_and_only_grown_tables_are_vacuumed(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    monkeypatch.setattr(
        harness, "_bulk_insert", lambda _runtime, table, _rows, _chunk: sent.append(table.name)
    )
    harness.preload(_runtime(sent), invocations=3, listings=2, say=lambda _line: None)
    assert sent == [
        "VACUUM invocations",  # before the load: its rows go where the dead ones were
        "listings",
        "versions",
        "invocations",
        "VACUUM (ANALYZE) invocations, listings, versions",
        "ANALYZE",
        "CHECKPOINT",
    ]
