"""What the click CLI prints on both stores (decision 0301): a list as a table for a person and
the same JSON as before with `--json`; `mercato migrate` draws a bar per revision only on a
terminal, and reaches the same schema either way."""

from __future__ import annotations

import gc
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from builders.event_loops import run_on_fresh_loop
from builders.invocation_world import World, running_world
from builders.invocations import ScriptedProvider, unknown
from mercato.cli.commands_core import pending_revisions
from mercato.cli.main import main
from mercato.db.engine import make_engine
from mercato.worker import loops


def _point_at(monkeypatch: pytest.MonkeyPatch, db_url: str, data_dir: Path) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATABASE_URL", db_url)
    monkeypatch.setenv("MERCATO_DATA_DIR", str(data_dir))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    finally:
        gc.collect()  # each command builds its own engine: close its pool now
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stuck_world(db_url: str, tmp_path: Path, provider: ScriptedProvider) -> Iterator[World]:
    """One call whose outcome stayed unknown through two reconciliations: stuck."""
    with running_world(db_url, tmp_path, provider, stuck_after_attempts=2) as world:
        world.provider.script(unknown())
        assert world.invoke({"n": 1}, key="stuck-1").status_code == 202
        for _ in range(2):
            world.provider.script_reconciliation(unknown())
            world.clock.advance(3600)
            run_on_fresh_loop(loops.run_once(world.runtime))
        yield world


def test_stuck_invocations_is_a_table_for_a_person_and_unchanged_json(
    stuck_world: World,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _point_at(monkeypatch, db_url, tmp_path / "cli")

    code, out, err = _run(capsys, "admin", "stuck-invocations", "--json")
    assert (code, err) == (0, "")
    (item,) = json.loads(out)["items"]
    assert set(item) == {"invocationId", "serviceCode", "version", "acceptedAt", "attempts"}
    assert out.count("\n") == 1  # one JSON object, one line

    code, out, err = _run(capsys, "admin", "stuck-invocations")
    assert (code, err) == (0, "")
    header, *rest = [line for line in out.splitlines() if line.strip()]
    assert header.split() == ["INVOCATION", "SERVICE", "VERSION", "ACCEPTED", "RECONCILIATIONS"]
    (row,) = [line.split() for line in rest if item["invocationId"] in line]
    expected = [item["invocationId"], item["serviceCode"], item["version"], item["acceptedAt"]]
    assert row == [*expected, str(item["attempts"])]


@pytest.fixture
def empty_db_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A database of the same store with no schema at all."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"mercato_empty_{uuid.uuid4().hex[:12]}"
    admin = create_engine(db_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(db_url).set(database=name).render_as_string(hide_password=False)
    finally:
        gc.collect()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_migrate_says_each_migration_then_where_it_stands(
    empty_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 41 item 5: one line per migration applied, in plain words; "migrated to <head>"
    on an empty database and "already up to date" when nothing was left to do."""
    _point_at(monkeypatch, empty_db_url, tmp_path / "data")
    engine = make_engine(empty_db_url)
    try:
        pending = pending_revisions(engine)
        head = pending[-1].revision

        code, out, err = _run(capsys, "migrate")

        assert (code, err) == (0, "")
        *applied, last = out.splitlines()
        assert last == f"migrated to {head}"
        assert [line.split(":")[0] for line in applied] == [
            f"applied {revision.revision}" for revision in pending
        ]
        assert applied[0] == "applied 0001_accounts: Accounts, API keys, sessions"
        assert not any(
            re.search(r"decision|\b0\d{3}\b", line.split(": ", 1)[1]) for line in applied
        )
        assert pending_revisions(engine) == []
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM accounts")).scalar_one() == 0

        assert _run(capsys, "migrate") == (0, f"already up to date ({head})\n", "")
    finally:
        engine.dispose()
