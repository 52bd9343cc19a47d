"""A refusal travels from its rule to its answer as one exception type caught in one place
(issue 40): no service catches the database layer's `guarded.Refused` to name it (the run names
it: `Run.refusal`, `runner.run(..., refusal)`), and in the invoke flow only `_answer` catches a
`MercatoError` (then the edge renders it)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import mercato.db
from mercato.core.errors import MercatoError
from mercato.invocations import flows

SRC = Path(mercato.db.__file__).resolve().parent.parent


def _caught(handler: ast.ExceptHandler) -> list[str]:
    """The dotted names an `except` clause names."""
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [ast.unparse(kind) for kind in kinds if kind is not None]


def test_only_the_plan_runner_catches_the_database_layers_refusal() -> None:
    catching = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and any(
                name.split(".")[-1] == "Refused" for name in _caught(node)
            ):
                catching.add(path.relative_to(SRC).as_posix())
    # The plan runner throws it into a plan whose run names no error for it.
    assert catching == {"db/plans.py"}


def test_the_invoke_flow_catches_a_refusal_in_one_place() -> None:
    catching = set()
    for node in ast.walk(ast.parse(inspect.getsource(flows))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for handler in ast.walk(node):
            if not isinstance(handler, ast.ExceptHandler):
                continue
            for name in _caught(handler):
                kind = getattr(flows, name.split(".")[0], None)
                for part in name.split(".")[1:]:
                    kind = getattr(kind, part, None)
                if isinstance(kind, type) and issubclass(kind, MercatoError):
                    catching.add(node.name)
    # `_valid_manifest` judges a provider's result (a contract violation), not a call's refusal.
    assert catching == {"_answer", "_valid_manifest"}
