"""What Mercato creates for its data is private to its user (issue 39 item 8, decision 0521).

Under the usual umask (022) the data dir came out 0755 and the SQLite database, its -wal and
-shm 0644: password hashes and sealed credentials readable by every local user. And the demo's
settings were written through `mercato-up.json.partial` opened without O_EXCL / O_NOFOLLOW, so a
link planted at that name had the settings written wherever it pointed.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from mercato.db.engine import make_engine
from mercato.db.migrate import upgrade
from mercato.db.runtime import Runtime
from mercato.settings import DEMO_SETTINGS_FILE, Settings, load_settings, record_demo_settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most systems start users with: group and others may read what is made."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.sqlite_only
def test_a_new_sqlite_database_its_journals_and_data_dir_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    data_dir = tmp_path / "fresh" / "var"
    monkeypatch.setenv("MERCATO_ENV", "dev")
    monkeypatch.setenv("MERCATO_DATA_DIR", str(data_dir))
    monkeypatch.delenv("MERCATO_DATABASE_URL", raising=False)
    settings = load_settings()
    assert _mode(data_dir) == 0o700
    engine = make_engine(settings.resolved_database_url)
    try:
        upgrade(engine)
        with engine.begin() as connection:  # a write: the WAL and its index are in use
            connection.execute(text("CREATE TABLE probe (n INTEGER)"))
            connection.execute(text("INSERT INTO probe VALUES (1)"))
        made = sorted(path.name for path in data_dir.iterdir())
        assert made == ["mercato.db", "mercato.db-shm", "mercato.db-wal"]
        assert {name: _mode(data_dir / name) for name in made} == dict.fromkeys(made, 0o600)
    finally:
        engine.dispose()


def test_a_runtime_makes_its_data_dir_private_and_leaves_an_existing_one_alone(
    settings: Settings, tmp_path: Path
) -> None:
    made = tmp_path / "srv" / "made-by-mercato"
    runtime = Runtime.from_settings(settings.model_copy(update={"data_dir": made}))
    runtime.db.dispose()
    assert _mode(made) == 0o700
    assert _mode(made.parent) == 0o755  # a missing parent is made as usual: only the data dir

    chosen = tmp_path / "chosen-by-the-operator"
    chosen.mkdir(mode=0o750)
    runtime = Runtime.from_settings(settings.model_copy(update={"data_dir": chosen}))
    runtime.db.dispose()
    assert _mode(chosen) == 0o750


def test_an_existing_database_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    database = tmp_path / "shared.db"
    database.touch()
    database.chmod(0o640)
    engine = make_engine(f"sqlite:///{database}")
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    assert _mode(database) == 0o640


# --- mercato-up.json.partial ------------------------------------------------------------------


@pytest.fixture
def demo_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in list(os.environ):
        if name.upper().startswith("MERCATO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MERCATO_SIGNUP_POINTS", "25")
    return Settings(env="dev", data_dir=tmp_path / "var")


def _partial(settings: Settings) -> Path:
    return settings.data_dir / (DEMO_SETTINGS_FILE + ".partial")


def _assert_written(settings: Settings) -> None:
    path = settings.data_dir / DEMO_SETTINGS_FILE
    assert not path.is_symlink() and _mode(path) == 0o600
    recorded = json.loads(path.read_text())["settings"]
    assert recorded["MERCATO_SIGNUP_POINTS"] == "25"
    assert not _partial(settings).exists() and not _partial(settings).is_symlink()


def test_a_link_planted_at_the_partial_name_is_not_followed(
    demo_settings: Settings, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own content\n")
    victim.chmod(0o644)
    demo_settings.data_dir.mkdir()
    _partial(demo_settings).symlink_to(victim)

    record_demo_settings(demo_settings)

    assert victim.read_text() == "the victim's own content\n"
    assert _mode(victim) == 0o644
    _assert_written(demo_settings)


def test_a_dangling_link_at_the_partial_name_creates_nothing_where_it_points(
    demo_settings: Settings, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere" / "planted.json"
    target.parent.mkdir()
    demo_settings.data_dir.mkdir()
    _partial(demo_settings).symlink_to(target)

    record_demo_settings(demo_settings)

    assert not target.exists()
    _assert_written(demo_settings)


def test_a_stale_partial_from_a_run_that_died_is_replaced(demo_settings: Settings) -> None:
    demo_settings.data_dir.mkdir()
    stale = _partial(demo_settings)
    stale.write_text('{"settings": {"MERCATO_SIGNUP_POINTS": "9')  # cut off mid-write
    stale.chmod(0o644)

    record_demo_settings(demo_settings)

    _assert_written(demo_settings)
