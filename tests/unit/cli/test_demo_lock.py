"""`mercato up`'s locks (decision 0551): one run per data directory (flock) and per PostgreSQL
database (a session advisory lock); the refusal is one line naming the running one, never a
database password."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import make_url

from mercato.cli import demo_lock


def test_a_held_data_dir_is_refused_naming_the_holder_until_it_is_released(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'mercato.db'}"
    first = demo_lock.acquire(tmp_path, url)
    try:
        with pytest.raises(demo_lock.AlreadyRunning) as starting:
            demo_lock.acquire(tmp_path, url)
        assert f"still starting (pid {os.getpid()})" in str(starting.value)
        first.announce("http://127.0.0.1:8123")
        with pytest.raises(demo_lock.AlreadyRunning) as running:
            demo_lock.acquire(tmp_path, url)
        message = str(running.value)
        assert "\n" not in message
        assert f"on the data directory {tmp_path}: http://127.0.0.1:8123 (pid" in message
    finally:
        first.release()
    demo_lock.acquire(tmp_path, url).release()  # free again once released


@pytest.mark.postgres_only  # SQLite's database is in the data dir, which the test above locks
def test_a_held_postgresql_database_is_refused_from_another_data_dir(
    db_url: str, tmp_path: Path
) -> None:
    given = make_url(db_url)
    # Trust authentication ignores the password: it is there to be kept out of the message.
    url = make_url(db_url).set(password="a-secret-password").render_as_string(hide_password=False)
    first = demo_lock.acquire(tmp_path / "one", url)
    try:
        first.announce("http://127.0.0.1:8124")
        with pytest.raises(demo_lock.AlreadyRunning) as running:
            demo_lock.acquire(tmp_path / "two", url)
        message = str(running.value)
        assert f"on the database {given.host}:{given.port or 5432}/{given.database}:" in message
        assert message.endswith(
            ": http://127.0.0.1:8124; stop it first, or give this one another MERCATO_DATABASE_URL"
        )
        assert "a-secret-password" not in message
        # The refused run released what it took: its own data dir is free.
        demo_lock.acquire(tmp_path / "two", f"sqlite:///{tmp_path / 'two.db'}").release()
    finally:
        first.release()
    demo_lock.acquire(tmp_path / "two", url).release()  # the database is free again
