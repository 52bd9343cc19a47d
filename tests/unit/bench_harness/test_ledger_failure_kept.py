"""A benchmark run whose ledger check fails keeps its work directory (the database and the
processes' logs) and names the calls left unfinished; a run that passes leaves nothing."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).parents[3]

FAILED = {
    "verify_ledger_balanced": True,
    "accepted": 3,
    "settled": 2,
    "released": 0,
    "held_reservations": 1,
    "answers_200": 2,
    "answers_by_status": {"200": 2, "500": 1},
    "unsettled": [
        {"id": "inv_1", "state": "DISPATCHING", "settlement": "PENDING", "request_id": "req-1"}
    ],
    "every_accepted_call_settled_once": False,
}
PASSED = {**FAILED, "settled": 3, "held_reservations": 0, "answers_200": 3, "unsettled": []}
PASSED["every_accepted_call_settled_once"] = True


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is a tool beside the package, not in it
    return importlib.import_module("bench.harness")


def _run(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ledger: dict[str, Any]
) -> tuple[list[Path], str]:
    workdirs: list[Path] = []

    def run_store(store: str, options: Any, workdir: Path) -> dict[str, Any]:
        (workdir / "serve.log").write_text("request_id=req-1 failed\n")
        workdirs.append(workdir)
        return {"ledger": ledger}

    monkeypatch.setattr(harness, "run_store", run_store)
    options = harness.Options(stores=("sqlite",), out_dir=tmp_path / "out", chart=False)
    try:
        harness.run(options)
    except harness.LedgerCheckFailed as failed:
        return workdirs, str(failed)
    return workdirs, ""


def test_a_failed_ledger_check_keeps_the_work_directory_and_names_the_unfinished_calls(
    harness: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (workdir,), failure = _run(harness, monkeypatch, tmp_path, FAILED)
    try:
        assert "'500': 1" in failure and "'request_id': 'req-1'" in failure
        assert (workdir / "serve.log").read_text() == "request_id=req-1 failed\n"
        assert f"kept {workdir}" in capsys.readouterr().err
    finally:
        for item in workdir.iterdir():
            item.unlink()
        workdir.rmdir()


def test_a_passed_ledger_check_removes_the_work_directory(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (workdir,), failure = _run(harness, monkeypatch, tmp_path, PASSED)
    assert failure == "" and not workdir.exists()
    assert "unsettled" not in harness.ledger_line(PASSED)
