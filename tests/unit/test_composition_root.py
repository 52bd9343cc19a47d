"""One composition root (STYLE.md 11, docs/architecture.md "The Runtime"): the shipped package
reads no environment outside the settings, chooses no behaviour by what imports, swaps no
module attribute, and carries no simulation; the production Runtime has no failpoints."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from mercato.core.clock import SystemClock
from mercato.core.failpoints import NO_FAILPOINTS
from mercato.core.ids import SYSTEM_IDS, bound, new_id
from mercato.db.runtime import NoProviderClient, Runtime
from mercato.dispatch.observed import ObservedProviderClient
from mercato.settings import Settings
from mercato.web.app import create_app

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "mercato"  # the platform's sources (mercato may be a namespace package)
SIMULATION = ROOT / "tests" / "support" / "simulation"

# The few places that may touch the process environment, and why.
ENVIRONMENT_ALLOWED = {
    "settings.py": "the settings: the one reader of MERCATO_* (and PROMETHEUS_MULTIPROC_DIR)",
    "cli/demo_up.py": "`mercato up` defaults MERCATO_ENV=dev and hands its environment on to the "
    "processes it supervises",
    "cli/commands_core.py": "`serve --workers N` exports the metrics directory to its workers",
}
# Imports by name that choose nothing: the model registry of a lower layer, the CLI's command
# modules imported when one of their commands runs (a fixed table, decision 0391) and Alembic's
# revision files (whose names start with digits).
IMPORT_BY_NAME_ALLOWED = {
    "db/models.py",
    "cli/main.py",
    "db/migrations/versions/0010_attempts_and_stuck.py",
    "db/migrations/versions/0011_drop_money_functions.py",
    "db/migrations/versions/0012_provider_lifecycle.py",
}
# An optional extra, not a switch: the mercato-provider wheel's PostgreSQL store names the extra
# to install when psycopg is missing (decision 0281).
IMPORT_ERROR_ALLOWED = {"provider/store.py"}


def _sources(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(root).as_posix(), ast.parse(path.read_text(), str(path))


def _environment_uses(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "environb"}) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in {"environ", "getenv", "environb"} for a in node.names)
        ):
            lines.append(node.lineno)
    return lines


def test_nothing_outside_the_settings_reads_the_environment() -> None:
    found = {
        name: lines
        for name, tree in _sources(PACKAGE)
        if name not in ENVIRONMENT_ALLOWED and (lines := _environment_uses(tree))
    }

    assert found == {}, f"os.environ outside settings.py: {found}"


def test_no_import_switch_chooses_behaviour() -> None:
    found: dict[str, list[int]] = {}
    for name, tree in _sources(PACKAGE):
        for node in ast.walk(tree):
            switch = (
                name not in IMPORT_ERROR_ALLOWED
                and isinstance(node, ast.ExceptHandler)
                and any(
                    isinstance(n, ast.Name) and n.id in {"ImportError", "ModuleNotFoundError"}
                    for n in ast.walk(node.type or ast.Constant(None))
                )
            )
            by_name = (
                isinstance(node, ast.Attribute)
                and node.attr == "import_module"
                and name not in IMPORT_BY_NAME_ALLOWED
            )
            if switch or by_name:
                found.setdefault(name, []).append(node.lineno)

    assert found == {}, f"import switches: {found}"


def _module_names(tree: ast.Module) -> set[str]:
    """Names this file binds to modules (`import x`, `import x as y`, `from p import module`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                try:
                    found = importlib.util.find_spec(f"{node.module}.{alias.name}")
                except ModuleNotFoundError:
                    found = None
                if found is not None:
                    names.add(alias.asname or alias.name)
    return names


def _module_attribute_swaps(tree: ast.Module) -> list[int]:
    modules = _module_names(tree)
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"setattr", "delattr"}
            and node.args
        ):
            targets = [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in modules
            ):
                lines.append(node.lineno)
    return lines


def test_no_shipped_module_swaps_an_attribute_of_a_module() -> None:
    found = {
        name: lines for name, tree in _sources(PACKAGE) if (lines := _module_attribute_swaps(tree))
    }

    assert found == {}, f"module attributes assigned: {found}"


def test_the_simulation_is_not_shipped_and_drives_the_platform_through_its_runtime() -> None:
    assert importlib.util.find_spec("mercato.simulation") is None
    assert not (PACKAGE / "simulation").exists()
    # Its seams go through the Runtime; only the deliberate bugs wrap platform functions.
    found = {
        name: lines
        for name, tree in _sources(SIMULATION)
        if name != "bugs.py" and (lines := _module_attribute_swaps(tree))
    }
    assert found == {}, f"the simulation swaps module attributes: {found}"


def test_the_swap_detector_sees_a_swap() -> None:
    tree = ast.parse(
        "from mercato.invocations import flows\nimport time\n"
        "flows.conclude = None\nsetattr(time, 'sleep', None)\nlocal = object()\nlocal.x = 1\n"
    )

    assert _module_attribute_swaps(tree) == [3, 4]


def test_the_production_runtime_has_no_failpoints_and_the_real_parts(tmp_path: Path) -> None:
    runtime = Runtime.from_settings(Settings(env="dev", data_dir=tmp_path))
    try:
        assert runtime.failpoints is NO_FAILPOINTS
        assert isinstance(runtime.clock, SystemClock)
        assert runtime.ids is SYSTEM_IDS
        with pytest.raises(NoProviderClient):
            runtime.provider_client()
        app = create_app(runtime)  # the app factory completes it once
        assert isinstance(app.state.runtime.provider_client(), ObservedProviderClient)
        assert app.state.runtime is runtime  # completed in place: one runtime per process
    finally:
        runtime.db.dispose()


def test_new_id_draws_from_the_bound_source_and_the_system_outside() -> None:
    class Fixed:
        def new(self, prefix: str) -> str:
            return f"{prefix}_fixed"

    with bound(Fixed()):
        assert new_id("inv") == "inv_fixed"
    assert new_id("inv") != "inv_fixed"
    assert new_id("inv").startswith("inv_") and len(new_id("inv")) == len("inv_") + 25
