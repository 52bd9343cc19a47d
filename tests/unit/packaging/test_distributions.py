"""The three distributions' definitions (decision 0280), checked without building anything.

scripts/wheels builds the wheels and tests each installed alone; these catch a definition that
drifted (a version, a package in two distributions or in none, a dependency an SDK must not
have, an SDK test importing the platform) in the ordinary suite, in milliseconds.
"""

from __future__ import annotations

import ast
import os
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
SDK_MODULES = ("mercato.client", "mercato.provider", "mercato.protocol")


def _project(name: str) -> dict:
    path = ROOT / "pyproject.toml" if name == "." else ROOT / "packages" / name / "pyproject.toml"
    return tomllib.loads(path.read_text())


def _requirement_names(project: dict) -> set[str]:
    names = set()
    for requirement in project["project"].get("dependencies", []):
        name = requirement.split(";")[0]
        for stop in "[<>=!~ ":
            name = name.split(stop)[0]
        names.add(name.lower())
    return names


def _packages(project: dict) -> set[str]:
    setuptools = project["tool"]["setuptools"]
    if "packages" in setuptools and isinstance(setuptools["packages"], list):
        return set(setuptools["packages"])
    found = setuptools["packages"]["find"]  # setuptools' rule: fnmatch on dotted names
    include, exclude = found.get("include", ["*"]), found.get("exclude", [])
    return {
        name
        for name in _python_packages() | {"mercato"}
        if any(fnmatchcase(name, p) for p in include)
        and not any(fnmatchcase(name, p) for p in exclude)
    }


def _python_packages() -> set[str]:
    """Every directory under src/ holding a module, as a dotted package name."""
    return {
        ".".join(path.parent.relative_to(SRC).parts)
        for path in SRC.rglob("*.py")
        if "__pycache__" not in path.parts and path.parent != SRC
    }


def test_one_version_for_the_three_distributions_and_the_development_install() -> None:
    versions = {
        name: _project(name)["project"]["version"]
        for name in (".", "mercato", "mercato-client", "mercato-provider")
    }
    assert len(set(versions.values())) == 1, versions


def test_mercato_is_a_namespace_package_shared_by_the_three() -> None:
    assert not (SRC / "mercato" / "__init__.py").exists()


def test_every_package_ships_in_exactly_one_distribution() -> None:
    shipped = {name: _packages(_project(name)) for name in ("mercato-client", "mercato-provider")}
    shipped["mercato"] = _packages(_project("mercato"))
    assert shipped["mercato-client"] == {"mercato.client"}
    assert shipped["mercato-provider"] == {"mercato.provider", "mercato.protocol"}
    assert not shipped["mercato"] & set(SDK_MODULES)
    assert "mercato.providers" in shipped["mercato"]  # the platform's, not the SDK's
    everything = _python_packages() | {"mercato"}
    assert set().union(*shipped.values()) >= everything
    names = list(shipped)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            assert not shipped[first] & shipped[second], (first, second)


def test_the_sdks_depend_on_little_and_the_platform_on_the_development_list() -> None:
    assert _requirement_names(_project("mercato-client")) == {"httpx"}
    provider = _project("mercato-provider")
    assert _requirement_names(provider) == {"starlette", "uvicorn"}
    assert [r.split("[")[0] for r in provider["project"]["optional-dependencies"]["postgres"]] == [
        "psycopg"
    ]
    platform = _project("mercato")
    assert platform["project"]["dynamic"] == ["dependencies"]
    assert platform["tool"]["setuptools"]["dynamic"]["dependencies"] == {
        "file": ["requirements.txt"]
    }
    root = _requirement_names(_project("."))
    assert {"httpx", "starlette", "uvicorn", "psycopg"} <= root


def test_the_platform_requires_the_root_list_and_the_two_sdks_at_the_same_version() -> None:
    """packages/mercato/requirements.txt is a copy (decision 0550): `scripts/wheels
    --write-requirements` rewrites it after a change to the root pyproject.toml's list."""
    text = (ROOT / "packages" / "mercato" / "requirements.txt").read_text()
    listed = [line for line in text.splitlines() if line and not line.startswith("#")]
    root = _project(".")["project"]
    version = root["version"]
    assert listed == [
        *root["dependencies"],
        f"mercato-client=={version}",
        f"mercato-provider=={version}",
    ]


def _entries(directory: Path) -> set[str]:
    return {
        p.name
        for p in directory.iterdir()
        if p.name != "__pycache__" and not p.name.endswith(".egg-info")
    }


def test_each_package_directory_links_every_entry_of_the_one_src_tree_once() -> None:
    """packages/<name>/src holds relative symbolic links into src/ (decision 0550): together
    they name every entry of src/mercato and src/mercato_examples exactly once, so `pip install
    ./packages/<name>` builds from this checkout and a new subpackage cannot be left out."""
    linked: dict[Path, str] = {}
    for name in ("mercato", "mercato-client", "mercato-provider"):
        package_src = ROOT / "packages" / name / "src"
        assert _entries(package_src) <= {"mercato", "mercato_examples"}, name
        assert not (package_src / "mercato").is_symlink(), "mercato is a namespace: a real dir"
        candidates = [package_src / "mercato" / e for e in _entries(package_src / "mercato")]
        if (package_src / "mercato_examples").exists():
            candidates.append(package_src / "mercato_examples")
        for link in candidates:
            assert link.is_symlink(), link
            assert not os.path.isabs(os.readlink(link)), f"{link} must be a relative link"
            target = link.resolve()
            assert target.parent in {SRC, SRC / "mercato"}, link
            assert target.name == link.name, link
            assert target not in linked, f"{target} linked by {linked.get(target)} and {name}"
            linked[target] = name
    expected = {SRC / "mercato_examples"} | {SRC / "mercato" / e for e in _entries(SRC / "mercato")}
    assert set(linked) == expected
    assert {t.name for t, n in linked.items() if n == "mercato-client"} == {"client"}
    assert {t.name for t, n in linked.items() if n == "mercato-provider"} == {
        "provider",
        "protocol",
    }


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_sdk_tests_import_only_their_sdk() -> None:
    allowed = {
        "client_sdk": ("mercato.client", "client_sdk"),
        "provider_sdk": ("mercato.provider", "mercato.protocol", "provider_sdk"),
    }
    for directory, own in allowed.items():
        for path in (ROOT / "tests" / directory).glob("*.py"):
            for name in _imports(path):
                top = name.split(".")[0]
                if top in {"mercato", "mercato_examples", "builders", "client_sdk", "provider_sdk"}:
                    assert name.startswith(own), f"{path.name} imports {name}"
                assert top not in {"sqlalchemy", "fastapi", "pydantic"}, f"{path.name}: {name}"
