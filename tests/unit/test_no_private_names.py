"""No file under src/ reaches into another distribution's private names (issue 40).

Every file is read with `ast` and three things are refused:

- an import from a module whose dotted path has a private part (`starlette._utils`), or of a
  private name (`from click.parser import _OptionParser`), from outside `mercato`;
- an attribute `x._name` (not a dunder) on anything but `self`/`cls` when `_name` is defined
  nowhere in the project's own source, or is defined by a library the file imports and not in
  the file itself or a project module it imports (`child._value` on a prometheus_client
  child), and `getattr`/`setattr`/
  `hasattr` with such a name as a constant;
- `self._name` or `cls._name` when the file does not define `_name` and a library it imports
  does: a private member inherited from a library class.

The standard library is not another distribution and is not checked. The few kept ones are
listed in `KEPT`, each with the decision that keeps it; anything else found fails the test, and
a kept one no longer found fails it too (the list stays true).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

KEPT: dict[tuple[str, str], str] = {
    # The CLI's option parsing (decision 0575): click exposes no public parser hook.
    ("mercato/cli/framework.py", "click.parser._OptionParser"): "0575",
    ("mercato/cli/framework.py", "click.parser._ParsingState"): "0575",
    ("mercato/cli/framework.py", "self._short_opt"): "0575",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sources() -> dict[str, ast.Module]:
    return {
        path.relative_to(SRC).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted(SRC.rglob("*.py"))
    }


def _defined(tree: ast.Module) -> set[str]:
    """The names a file defines: functions, classes, variables, parameters, import aliases,
    attributes set on `self`/`cls`, and the names in a `__slots__`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
        ):
            names.update(
                item.value
                for item in ast.walk(node.value)
                if isinstance(item, ast.Constant) and isinstance(item.value, str)
            )
    return names


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _libraries(tree: ast.Module) -> set[str]:
    """The top-level packages of other distributions a file imports."""
    tops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return {top for top in tops if top != "mercato" and top not in sys.stdlib_module_names}


def _own_modules(tree: ast.Module) -> set[str]:
    """The names a file binds to modules of its own project."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] == "mercato"
            )
        elif isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").split(".")[0] == "mercato"
        ):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


@cache
def _library_names(top: str) -> frozenset[str]:
    """Every private-looking identifier in the source of the installed package `top`."""
    spec = importlib.util.find_spec(top)
    if spec is None:
        return frozenset()
    roots = list(spec.submodule_search_locations or [])
    files = [Path(spec.origin)] if not roots and spec.origin else []
    for root in roots:
        files.extend(Path(root).rglob("*.py"))
    names: set[str] = set()
    for path in files:
        names.update(_IDENTIFIER.findall(path.read_text(encoding="utf-8", errors="replace")))
    return frozenset(names)


_IDENTIFIER = re.compile(r"(?<![\w])_[A-Za-z_]\w*")


def _in_library(name: str, tops: set[str]) -> bool:
    return any(name in _library_names(top) for top in tops)


def _imported_files(tree: ast.Module, package: str) -> set[str]:
    """The project's files a file imports from (as paths under src/, existing or not)."""
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            modules.add(base)
            modules.update(f"{base}.{alias.name}" for alias in node.names)
    files: set[str] = set()
    for module in modules:
        if module.split(".")[0] == "mercato":
            stem = module.replace(".", "/")
            files.update((f"{stem}.py", f"{stem}/__init__.py"))
    return files


def _found(defined: dict[str, set[str]], path: str, tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(path, what) for each reach into another distribution's private names in one file."""
    project = set().union(*defined.values())
    here = set(defined[path])
    package = path.removesuffix(".py").replace("/", ".")
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    for imported in _imported_files(tree, package):
        here |= defined.get(imported, set())
    tops = _libraries(tree)
    own_modules = _own_modules(tree)

    def foreign(name: str) -> bool:
        return name not in project or (name not in here and _in_library(name, tops))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "mercato":
                continue
            if any(_private(part) for part in node.module.split(".")):
                yield path, node.module
            for alias in node.names:
                if _private(alias.name):
                    yield path, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "mercato" and any(_private(part) for part in parts):
                    yield path, alias.name
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if _on_self(node):
                if node.attr not in here and _in_library(node.attr, tops):
                    yield path, f"self.{node.attr}"
            elif isinstance(node.value, ast.Name) and node.value.id in own_modules:
                continue
            elif foreign(node.attr):
                yield path, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and foreign(node.args[1].value)
        ):
            yield path, node.args[1].value


def private_reaches(sources: dict[str, ast.Module]) -> set[tuple[str, str]]:
    defined = {path: _defined(tree) for path, tree in sources.items()}
    return {found for path, tree in sources.items() for found in _found(defined, path, tree)}


def test_no_file_reaches_into_another_distributions_private_names() -> None:
    found = private_reaches(_sources())
    assert sorted(found - KEPT.keys()) == []


def test_every_kept_exception_is_still_needed() -> None:
    found = private_reaches(_sources())
    assert sorted(KEPT.keys() - found) == []


def test_the_scan_finds_each_kind_of_reach() -> None:
    """Each kind of reach the issue named, in a file of its own."""
    cases = {
        "a.py": "from fastapi.telemetry._asgi import ExceptionTelemetryMiddleware\n",
        "b.py": "from starlette._utils import get_route_path\n",
        "c.py": "from click.parser import _OptionParser\n",
        "d.py": "import prometheus_client\ndef f(child):\n    return child._value.inc\n",
        "e.py": "def f(child):\n    return child._upper_bounds\n",
        "f.py": "def f(request, body):\n    request._body = body\n",
        "g.py": (
            "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol\n"
            "class P(HttpToolsProtocol):\n"
            "    def data_received(self, data):\n"
            "        self._unset_keepalive_if_required()\n"
        ),
        "h.py": "def f(s):\n    return getattr(s, '_post_values_clause', None)\n",
        "i.py": "class A:\n    __slots__ = ('_mine',)\n    def f(self, other):\n"
        "        return other._mine, self._mine\n",
    }
    sources = {name: ast.parse(text) for name, text in cases.items()}
    assert sorted(private_reaches(sources)) == [
        ("a.py", "fastapi.telemetry._asgi"),
        ("b.py", "starlette._utils"),
        ("c.py", "click.parser._OptionParser"),
        ("d.py", "_value"),
        ("e.py", "_upper_bounds"),
        ("f.py", "_body"),
        ("g.py", "self._unset_keepalive_if_required"),
        ("h.py", "_post_values_clause"),
    ]
