"""The installed platform is complete: modules, migrations, templates, static files, the CLI.

These run in the development install too, but they matter where the `mercato` wheel is installed
alone (scripts/wheels): a module, a data file or a dependency missing from the wheel fails here.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

SKIPPED = ("mercato.__main__", "mercato.db.migrations")


def _modules() -> list[str]:
    import mercato
    import mercato_examples

    names = []
    for package in (mercato, mercato_examples):
        prefix = package.__name__ + "."
        for info in pkgutil.walk_packages(package.__path__, prefix):
            if not info.name.startswith(SKIPPED):
                names.append(info.name)
    return sorted(names)


def test_every_module_of_the_platform_and_its_sdks_imports() -> None:
    names = _modules()
    for required in ("mercato.web.app", "mercato.client", "mercato.provider", "mercato.protocol"):
        assert required in names
    for name in names:
        importlib.import_module(name)


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}
    env.update(
        MERCATO_ENV="dev",
        MERCATO_DATA_DIR=str(tmp_path / "data"),
        MERCATO_DATABASE_URL=f"sqlite:///{tmp_path / 'mercato.db'}",
    )
    return env


def _mercato() -> str:
    script = Path(sys.executable).parent / "mercato"
    assert script.exists(), "the console script `mercato` is not installed"
    return str(script)


def test_the_console_script_runs_the_migrations_shipped_in_the_wheel(tmp_path: Path) -> None:
    ran = subprocess.run(
        [_mercato(), "migrate"], env=_environment(tmp_path), capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "mercato.db").stat().st_size > 0


def test_the_web_app_serves_its_templates_and_static_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess.run([_mercato(), "migrate"], env=_environment(tmp_path), check=True)
    for name, value in _environment(tmp_path).items():
        if name.startswith("MERCATO_"):
            monkeypatch.setenv(name, value)
    from fastapi.testclient import TestClient

    from mercato.web.asgi import create_app_from_env

    with TestClient(create_app_from_env()) as client:
        assert client.get("/health/live").status_code == 200
        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "/static/mercato.css" in page.text
        assert client.get("/static/mercato.css").status_code == 200
