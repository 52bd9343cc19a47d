"""A PostgreSQL money program's values (`runner.Runnable.values` picked by its
`aio_statements.ProgramStatement`) are exactly the ones the general path binds: `Prepared.bind`
of the inputs as `p_<name>` with a fresh id for each fresh input not given (decisions 0481,
0564)."""

from __future__ import annotations

import datetime as dt
import gc
from typing import Any

import pytest
from sqlalchemy import exc

from mercato.cases import service as _cases  # noqa: F401  (its programs, if any)
from mercato.core.ids import bound, format_id, new_id
from mercato.db import guarded
from mercato.db.aio_postgres import asyncpg_dialect
from mercato.db.aio_statements import ProgramStatement, Statements
from mercato.db.runner import Runnable
from mercato.invocations import money
from mercato.ledger import service as _ledger  # noqa: F401  (its programs)

_NOW = dt.datetime(2026, 11, 27, 8, 30, tzinfo=dt.UTC)


class _Counted:
    def __init__(self) -> None:
        self.made = 0

    def new(self, prefix: str) -> str:
        self.made += 1
        return format_id(prefix, self.made, self.made)


def _programs() -> list[guarded.Program]:
    found = {id(o): o for o in gc.get_objects() if isinstance(o, guarded.Program)}
    return sorted(found.values(), key=lambda program: program.name)


def _value(type_: Any, name: str) -> Any:
    try:
        kind = getattr(type_, "impl", type_).python_type
    except NotImplementedError:
        kind = str
    if kind is dt.datetime:
        return _NOW
    if kind is bool:
        return True
    if kind is int:
        return 7
    if kind is bytes:
        return b"payload"
    if kind is dict:
        return {"type": "object", "name": name}
    return f"v-{name}"


def _inputs(prepared: Any) -> dict[str, Any]:
    by_name = {bind.key: bind for bind in prepared.compiled.binds.values()}
    return {
        key[2:]: _value(by_name[key].type, key)
        for key, *_ in prepared.binds
        if key.startswith("p_")
    }


def _general(built: guarded.Compiled, params: dict[str, Any]) -> dict[str, Any]:
    values = {f"p_{name}": value for name, value in params.items()}
    for name, prefix in built.fresh:
        if name not in values:
            values[name] = new_id(prefix)
    return values


def _runnable(program: guarded.Program) -> Runnable[ProgramStatement]:
    dialect = asyncpg_dialect()
    return Runnable(
        program, "postgresql", lambda clause, literals: ProgramStatement(clause, literals, dialect)
    )


def _fast(program: guarded.Program, params: dict[str, Any]) -> Any:
    runnable = _runnable(program)
    assert runnable.statement is not None
    return list(runnable.statement.values(runnable.values(params), {}))


def _both(program: guarded.Program, params: dict[str, Any]) -> tuple[Any, Any]:
    built = guarded.compiled(program, "postgresql")
    statements = Statements(asyncpg_dialect())
    prepared = statements.prepare(built.statement)
    with bound(_Counted()):
        general = prepared.bind(_general(built, params))[1]
    with bound(_Counted()):
        fast = _fast(program, params)
    return general, fast


def test_the_invocations_programs_are_among_those_checked() -> None:
    names = {program.name for program in _programs()}
    assert {money.ACCEPT.name, money.SETTLE.name, money.RELEASE.name} <= names


@pytest.mark.parametrize("program", _programs(), ids=lambda program: program.name)
def test_a_programs_values_are_the_general_paths(program: guarded.Program) -> None:
    built = guarded.compiled(program, "postgresql")
    prepared = Statements(asyncpg_dialect()).prepare(built.statement)
    params = _inputs(prepared)
    general, fast = _both(program, params)
    assert fast == general
    # Fresh ids not given are drawn, in the same order; given ones are kept.
    for name, _prefix in built.fresh:
        params.pop(name[2:], None)
    general, fast = _both(program, params)
    assert fast == general


@pytest.mark.parametrize("program", [money.ACCEPT, money.SETTLE], ids=lambda p: p.name)
def test_a_missing_input_is_refused_alike(program: guarded.Program) -> None:
    built = guarded.compiled(program, "postgresql")
    prepared = Statements(asyncpg_dialect()).prepare(built.statement)
    params = _inputs(prepared)
    params.pop("now")
    with pytest.raises(exc.InvalidRequestError, match="'p_now'"):
        prepared.bind(_general(built, params))
    with pytest.raises(exc.InvalidRequestError, match="'p_now'"):
        _fast(program, params)
