"""The three package directories build and install with standard tools from a checkout
(issue 41, decision 0550): `pip install ./packages/<name>` in a fresh virtual environment,
`python -m build` and `uv build`, with no staging script.

The checkout is copied (symbolic links kept as links) so the builds write nothing into the
working tree and the links are proved relative. Installing uses pip's configured index and
cache, like `scripts/wheels`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]
SDK_DIRS = ("mercato/client/", "mercato/provider/", "mercato/protocol/")
OWNS = {
    "mercato-client": ("mercato/client/",),
    "mercato-provider": ("mercato/provider/", "mercato/protocol/"),
}
# Never in an SDK's environment: the platform and its stack, nor the other SDK.
PLATFORM_ONLY = {"mercato", "sqlalchemy", "alembic", "fastapi", "pydantic", "jinja2"}
FORBIDDEN = {
    "mercato-client": PLATFORM_ONLY | {"mercato-provider", "starlette", "uvicorn"},
    "mercato-provider": PLATFORM_ONLY | {"mercato-client"},
}
# What a fresh venv holds before anything is installed.
SEEDED = {"pip", "setuptools", "wheel"}
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(command: list[str], cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """packages/ and src/ of this checkout, copied with their links as links."""
    copy = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "packages", copy / "packages", symlinks=True, ignore=IGNORED)
    shutil.copytree(ROOT / "src", copy / "src", symlinks=True, ignore=IGNORED)
    return copy


def _venv(path: Path) -> Path:
    _run([sys.executable, "-m", "venv", str(path)], cwd=path.parent)
    return path / "bin" / "python"


def _site(python: Path) -> str:
    return _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        cwd=python.parent,
    ).strip()


def _installed(site: str) -> dict[str, importlib.metadata.Distribution]:
    return {
        _normalise(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[site])
    }


def _closure(root: str, installed: dict[str, importlib.metadata.Distribution]) -> set[str]:
    """The distributions `root` needs (no extras), by the installed metadata."""
    seen: set[str] = set()
    todo = [(_normalise(root), frozenset[str]())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        assert name in installed, f"{name} is required but not installed"
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen.add(name)
        for text in installed[name].requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in (extras or {""})
            ):
                continue
            todo.append((_normalise(requirement.name), frozenset(requirement.extras)))
    return seen


def _source_files(checkout: Path) -> set[str]:
    src = checkout / "src"
    return {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["mercato-client", "mercato-provider"])
def test_pip_installs_each_sdk_from_its_directory_with_only_its_requirements(
    name: str, checkout: Path, tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv")
    _run([str(python), "-m", "pip", "install", "-q", f"./packages/{name}"], cwd=checkout)

    installed = _installed(_site(python))
    assert set(installed) - SEEDED == _closure(name, installed)
    assert not set(installed) & FORBIDDEN[name]
    module = name.replace("-", ".")
    probe = (
        f"import importlib.util as u, {module}; "
        "print(u.find_spec('mercato.settings') is None, u.find_spec('mercato.cli') is None)"
    )
    assert _run([str(python), "-c", probe], cwd=tmp_path).split() == ["True", "True"]


def test_pip_installs_the_platform_from_the_checkout_and_it_migrates(
    checkout: Path, tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv")
    packages = ["./packages/mercato-client", "./packages/mercato-provider", "./packages/mercato"]
    _run([str(python), "-m", "pip", "install", "-q", *packages], cwd=checkout)

    installed = _installed(_site(python))
    assert set(installed) - SEEDED == _closure("mercato", installed)
    assert {"mercato-client", "mercato-provider"} <= set(installed)
    mercato = tmp_path / "venv" / "bin" / "mercato"
    env = {"MERCATO_ENV": "dev", "MERCATO_DATA_DIR": str(tmp_path / "var")}
    done = subprocess.run(
        [str(mercato), "migrate"],
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MERCATO_")}, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # the migrations (data files) were installed
    assert (tmp_path / "var" / "mercato.db").is_file()


def _wheel_files(out: Path, name: str) -> set[str]:
    wheels = list(out.glob(f"{name.replace('-', '_')}-*.whl"))
    assert len(wheels) == 1, wheels
    assert len(list(out.glob(f"{name.replace('-', '_')}-*.tar.gz"))) == 1
    with zipfile.ZipFile(wheels[0]) as archive:
        return {n for n in archive.namelist() if ".dist-info/" not in n}


@pytest.fixture(scope="module")
def build_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding `build` and `uv` from the configured index."""
    python = _venv(tmp_path_factory.mktemp("tools") / "venv")
    _run([str(python), "-m", "pip", "install", "-q", "build", "uv"], cwd=python.parent)
    return python.parent


def test_build_and_uv_build_make_each_distribution_with_every_file_in_one_wheel(
    checkout: Path, build_tools: Path, tmp_path: Path
) -> None:
    shipped: dict[str, dict[str, set[str]]] = {"build": {}, "uv": {}}
    for name in ("mercato-client", "mercato-provider", "mercato"):
        source = checkout / "packages" / name
        by_build, by_uv = tmp_path / "build" / name, tmp_path / "uv" / name
        _run([str(build_tools / "python"), "-m", "build", "-o", str(by_build), "."], cwd=source)
        _run([str(build_tools / "uv"), "build", "-q", "-o", str(by_uv), "."], cwd=source)
        shipped["build"][name] = _wheel_files(by_build, name)
        shipped["uv"][name] = _wheel_files(by_uv, name)
    assert shipped["build"] == shipped["uv"]

    files = shipped["build"]
    for name, owns in OWNS.items():
        assert files[name] and all(f.startswith(owns) for f in files[name]), name
    assert not any(f.startswith(SDK_DIRS) for f in files["mercato"])
    assert not files["mercato-client"] & files["mercato-provider"]
    assert not (files["mercato-client"] | files["mercato-provider"]) & files["mercato"]
    # Every file of the one src/ tree (modules, templates, static files, data) is in a wheel.
    assert set().union(*files.values()) == _source_files(checkout)
    assert json.dumps(sorted(files["mercato-client"])).count("py.typed") == 1
