"""Guarded statements: each money rule written once, as SQLAlchemy Core, run on both stores.

A `Program` is an ordered list of `Step`s. A step is one Core statement (INSERT or UPDATE …
RETURNING; on PostgreSQL also a locking SELECT) whose WHERE is its guard: it writes, and
returns a row, only when the rule allows. Its inputs are bind parameters (`Refs.param`) and
columns that earlier steps returned (`Refs.col`). What an empty step (no row) means is declared
with it (`Empty`):

- `REFUSE`: the operation is refused with the step's `code` and a `detail` (values read at the
  moment of refusal, e.g. the balance that was short); nothing of the operation is written.
  `required_if` makes the refusal conditional (a debit of zero points moves nothing).
- `STOP`: the operation ends quietly and writes nothing (the invocation's lease was lost).
- `SKIP`: nothing to do (a leg of zero points); steps reading its columns see no row.

`compile_program(program, dialect)` builds a program once per dialect (cache it at module level
or use `compiled(program, dialect)`, which memoizes); the two spellings differ only in how the
same step statements are put together:

- **PostgreSQL** (`Compiled.statement`): ONE statement, i.e. one round trip, without any
  database function. Its first CTE takes the advisory lock `MONEY_LOCK` shared, before any row
  lock; `Compiled.exclusive` is the same statement taking it exclusively, which a group commit
  sends (decisions 0370, 0440). Every step is a data-modifying CTE
  (`WITH s1 AS (INSERT … RETURNING …), s2 AS (UPDATE … WHERE x = (SELECT x FROM s1) … RETURNING
  …), …`) gated on the step before it, so the steps run in program order: `EXISTS (SELECT 1 FROM
  <last REFUSE/STOP step>)` (nothing runs after a refusal or a stop) and, after a SKIP step,
  `(SELECT count(*) FROM <it>) >= 0`. A column of an earlier step is a scalar subquery on its
  CTE (NULL when the step returned nothing, as the bound parameter is on SQLite). The final
  SELECT returns `mercato_ok` (1 done, 0 stopped) and the outputs (`<step>__<column>`); when a
  REFUSE step came back empty it casts the text `mercato-refusal|<code>|<detail>|…|<n>` to
  integer instead, and that error (SQLSTATE 22P02) aborts the whole statement: a guard cannot
  undo the writes of the steps before it, the abort does. Atomic on its own in autocommit
  (`Database.statement()`), or inside the caller's transaction or SAVEPOINT.
- **SQLite** (`Compiled.steps`): the same step statements, with the columns of earlier steps as
  bind parameters (`s_<step>_<column>`), run one after another in the caller's transaction
  (BEGIN IMMEDIATE has already serialised the writers). An empty REFUSE step raises before the
  next step runs; the caller's rollback or SAVEPOINT takes back the earlier ones. A write is
  spelled without its RETURNING where that is exact (`CompiledStep.counted`, decision 0490):
  SQLite gathers a RETURNING's rows in an ephemeral b-tree (and an INSERT … SELECT with one
  stages its SELECT in another), opened and closed on every run. Its row count then says
  whether the step wrote (0: empty), and the columns later steps or outputs read are the
  values it inserted as bound (`known`) or are read back by a unique key (`read`).

A step's builder describes a write as a `Write` (`insert_select`, `insert_rows`,
`update_where`; `.on_conflict_do_nothing()`, `.on_conflict_do_update(…)`, `.returning(…)`):
the statement without its RETURNING, the columns to return, and what the spelling without
RETURNING needs (the row an INSERT inserts, an upsert's conflict target, the columns an UPDATE
or an upsert sets). The compiler adds the RETURNING where it is kept (every PostgreSQL CTE, a
SQLite step that cannot be counted) and reads no part of a finished statement. A builder may
also return a plain Core statement (PostgreSQL's locking SELECT, a guard), never counted.

Ids the rules need fresh on every run (a transfer's, its entries', new accounts') are declared
by the steps (`Step.fresh`). Inputs are passed by name without prefix (`{"amount": 10, …}`);
the statements bind them as `p_<name>`, so no input can collide with a column name (an UPDATE
executed with a parameter named after a column would SET it).

This module only compiles. How a compiled program runs (its values and fresh ids, the step
loop, the one statement's row and refusal) is `mercato.db.runner`'s, the same for the sync
Session and the async drivers (decision 0564); a refusal raises `Refused` (`code`, `detail`),
which each domain service maps to its MercatoError.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.dml import Insert, Update
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BooleanClauseList,
    ClauseList,
    ColumnClause,
    Grouping,
)
from sqlalchemy.sql.schema import Column, UniqueConstraint
from sqlalchemy.types import TypeEngine

REFUSAL_TAG = "mercato-refusal"
MONEY_LOCK = int.from_bytes(b"mercato", "big")
"""The PostgreSQL advisory lock key of the money statements: each program takes it shared
(its first CTE, before any row lock); a group commit of several programs in one transaction
(`mercato.db.aio_postgres`) sends them taking it exclusively (`Compiled.exclusive`, decisions
0370, 0440)."""
_MONEY_LOCK_CTE = "mercato_money"


class Empty(enum.Enum):
    """What a step that returned no row means."""

    REFUSE = "refuse"
    STOP = "stop"
    SKIP = "skip"


class Refused(Exception):
    """A REFUSE step found its guard false: nothing of the operation was written."""

    def __init__(self, code: str, detail: tuple[str | None, ...]) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail

    def number(self, index: int) -> int:
        """Detail `index` as an integer (0 when absent)."""
        value = self.detail[index] if index < len(self.detail) else None
        return int(value) if value else 0


class Refs:
    """Where a step's builder takes its inputs from: one per program and dialect."""

    def __init__(
        self, dialect: str, ctes: Mapping[str, CTE] | None, types: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.dialect = dialect
        self.gate: ColumnElement[bool] = true()
        """The step's sequencing condition: every builder puts it in its WHERE."""
        self._ctes = ctes
        self._types = types
        self._params: dict[str, BindParameter[Any]] = {}
        self.read: set[tuple[str, str]] = set()
        """The (step, column) pairs the builders read (`col`)."""

    def param(self, name: str, type_: TypeEngine[Any] | type[TypeEngine[Any]]) -> Any:
        """The input `name` (a bind parameter `p_<name>`)."""
        found = self._params.get(name)
        if found is None:
            found = self._params[name] = bindparam(f"p_{name}", type_=type_)
        return found

    def col(self, step: str, column: str) -> Any:
        """Column `column` of the row step `step` returned."""
        self.read.add((step, column))
        if self._ctes is None:  # SQLite: bound from the row the step returned
            key = f"s_{step}_{column}"
            found = self._params.get(key)
            if found is None:
                found = self._params[key] = bindparam(key, type_=self._types[step][column])
            return found
        return select(self._ctes[step].c[column]).scalar_subquery()

    def insert(self, table: Table) -> Insert:
        """INSERT spelled for this dialect (upserts: `on_conflict_do_update`)."""
        if self.dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)


Refusal = Callable[[Refused], Exception]
"""What a refusal of a program is to its caller: the domain error for the `Refused` (its step's
code and detail), given with the run (`plans.Run.refusal`, `runner.run`) and raised by the
runner where it finds the refusal."""

Expr = Callable[[Refs], Any]
"""An input expression, built against a `Refs`."""


def param(name: str, type_: TypeEngine[Any] | type[TypeEngine[Any]]) -> Expr:
    return lambda refs: refs.param(name, type_)


def col(step: str, column: str) -> Expr:
    return lambda refs: refs.col(step, column)


def inline(value: str | int | None, type_: Any = None) -> Any:
    """A constant written into the SQL itself rather than bound (fewer parameters for the
    driver to parse and send on every run; the text stays the same on every run)."""
    if value is None:
        return null()
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"inline takes str, int or None, not {type(value).__name__}")
    if isinstance(value, int):
        return literal_column(str(int(value)), type_ or Integer)
    return literal_column("'" + value.replace("'", "''") + "'", type_ or String)


def const(value: Any, type_: TypeEngine[Any] | type[TypeEngine[Any]]) -> Expr:
    return lambda _refs: inline(value, type_)


@dataclass(frozen=True, eq=False)
class Write:
    """A step's write, described: what the compiler spells it from without reading any part of
    a finished statement. Built by `insert_select`, `insert_rows` or `update_where`; each
    method answers a copy."""

    statement: Any
    """The INSERT or UPDATE, without RETURNING."""
    returned: tuple[Any, ...] = ()
    """The columns its RETURNING gives (the step's row)."""
    values: Mapping[str, Any] | None = None
    """An INSERT of one row: the value of each column it inserts (None: unknown, several)."""
    conflict: tuple[str, ...] | None = None
    """An upsert: the columns of its conflict target (ON CONFLICT (…) DO UPDATE)."""
    updated: frozenset[str] | None = None
    """An UPDATE, or an upsert: the columns it SETs (None: unknown, never counted)."""

    def returning(self, *columns: Any) -> Write:
        """The same write returning `columns`."""
        return replace(self, returned=columns)

    @property
    def excluded(self) -> Any:
        """An upsert's `excluded` row (the values the INSERT proposed)."""
        return self.statement.excluded

    def on_conflict_do_nothing(self) -> Write:
        """The INSERT, inserting nothing where a row conflicts on any unique key."""
        return replace(self, statement=self.statement.on_conflict_do_nothing())

    def on_conflict_do_update(
        self,
        *,
        index_elements: Sequence[Any],
        set_: Mapping[str, Any],
        where: ColumnElement[bool] | None = None,
    ) -> Write:
        """The INSERT as an upsert: `ON CONFLICT (index_elements) DO UPDATE SET set_ [WHERE]`."""
        statement = self.statement.on_conflict_do_update(
            index_elements=index_elements, set_=set_, where=where
        )
        updated = frozenset(_names(set_))
        return replace(self, statement=statement, conflict=_names(index_elements), updated=updated)

    def returning_statement(self) -> Any:
        """The statement with its RETURNING (as the step runs where RETURNING is kept)."""
        return self.statement.returning(*self.returned) if self.returned else self.statement


def insert_select(
    refs: Refs, table: Table, values: Mapping[str, Any], *where: ColumnElement[bool]
) -> Write:
    """`INSERT INTO table (…) SELECT … WHERE gate AND where…` (always with a WHERE, which
    SQLite's upsert grammar needs): one row, `values` (column → value)."""
    chosen = select(*[value.label(name) for name, value in values.items()]).where(refs.gate, *where)
    return Write(refs.insert(table).from_select(list(values), chosen), values=dict(values))


def insert_rows(table: Table, names: Sequence[str], rows: Any) -> Write:
    """`INSERT INTO table (names) <rows>` of any number of rows (a UNION ALL of SELECTs, each
    with the gate in its WHERE): counted on SQLite only when nothing reads its row."""
    return Write(table.insert().from_select(list(names), rows))


def update_where(table: Table, values: Mapping[str, Any], *where: ColumnElement[bool]) -> Write:
    """`UPDATE table SET values WHERE where…` (put the gate in `where`)."""
    statement = update(table).where(*where).values(dict(values))
    return Write(statement, updated=frozenset(_names(values)))


def _names(columns: Any) -> tuple[str, ...]:
    """The column names of `columns` (Column objects or their names)."""
    return tuple(str(getattr(column, "name", column)) for column in columns)


@dataclass(frozen=True, eq=False)
class Step:
    name: str
    build: Callable[[Refs], Any]
    empty: Empty = Empty.REFUSE
    code: str = ""
    detail: Callable[[Refs], Sequence[Any]] | None = None
    required_if: Expr | None = None
    only: str | None = None  # the one dialect this step exists on (PostgreSQL's lock)
    fresh: tuple[tuple[str, str], ...] = ()
    """Inputs the runner fills with a fresh id when the caller gives none: (name, id prefix)."""


@dataclass(frozen=True, eq=False)
class Program:
    name: str
    steps: tuple[Step, ...]
    outputs: tuple[tuple[str, str], ...] = ()

    @property
    def fresh(self) -> tuple[tuple[str, str], ...]:
        """Every step's `fresh` inputs."""
        return tuple(item for step in self.steps for item in step.fresh)


@dataclass
class CompiledStep:
    step: Step
    statement: Any
    columns: tuple[str, ...]
    """The columns of its row the runner binds for the steps after it (`s_<step>_<column>`);
    on SQLite, of a `counted` step, only those a later step or an output reads."""
    required_if: Select[Any] | None
    detail: Select[Any] | None
    counted: bool = False
    """SQLite: `statement` is the step's write without RETURNING; its row count says whether
    the step wrote (0: the step is empty), and its row (`columns`) is `read` or `known`."""
    read: Select[Any] | None = None
    """SQLite, `counted`: reads `columns` of the row the write wrote, by a unique key, in the
    same transaction (run only when the write counted a row)."""
    known: tuple[str, ...] = ()
    """SQLite, `counted`, without `read`: the bind names whose values are `columns` (values
    the write inserted as they were bound)."""


@dataclass
class Compiled:
    dialect: str
    outputs: tuple[str, ...]
    fresh: tuple[tuple[str, str], ...] = ()  # (bind name, id prefix)
    statement: Select[Any] | None = None
    """PostgreSQL: the program's one statement (the money lock shared)."""
    steps: list[CompiledStep] = field(default_factory=list)  # SQLite
    exclusive: Select[Any] | None = None
    """PostgreSQL: `statement` taking the money lock exclusively (a group commit's)."""


def _returned(statement: Any) -> dict[str, Any]:
    columns = statement.selected_columns if isinstance(statement, Select) else None
    if columns is None:
        columns = statement.exported_columns
    return {str(c.key): c.type for c in columns}


def _anchors(step: Step) -> bool:
    return step.empty is Empty.STOP or (step.empty is Empty.REFUSE and step.required_if is None)


def compile_program(program: Program, dialect: str) -> Compiled:
    """Build the program's statements for `dialect` (see the module docstring)."""
    steps = [s for s in program.steps if s.only in (None, dialect)]
    outputs = tuple(f"{step}.{column}" for step, column in program.outputs)
    fresh = tuple((f"p_{name}", prefix) for name, prefix in program.fresh)
    if dialect == "postgresql":
        return _compile_one_statement(program, steps, outputs, fresh)
    types: dict[str, dict[str, Any]] = {}
    refs = Refs(dialect, None, types)
    built: list[tuple[Step, Any, Select[Any] | None, Select[Any] | None]] = []
    for step in steps:
        made = step.build(refs)
        if isinstance(made, Write):
            made = replace(made, statement=_in_lists(made.statement))
        else:
            made = _in_lists(made)
        types[step.name] = _returned(_with_returning(made))
        built.append(
            (
                step,
                made,
                None if step.required_if is None else _in_lists(select(step.required_if(refs))),
                None if step.detail is None else _in_lists(select(*step.detail(refs))),
            )
        )
    # Every step is built before any is spelled: a step's columns that nothing reads need
    # neither RETURNING nor a read.
    read = refs.read | {(step, column) for step, column in program.outputs}
    compiled = Compiled(dialect, outputs, fresh)
    for step, made, required_if, detail in built:
        columns = tuple(types[step.name])
        needed = tuple(column for column in columns if (step.name, column) in read)
        spelled = _counted(made, needed) if isinstance(made, Write) else None
        if spelled is None:
            statement = _with_returning(made)
            compiled.steps.append(CompiledStep(step, statement, columns, required_if, detail))
            continue
        write, read_back, known = spelled
        compiled.steps.append(
            CompiledStep(step, write, needed, required_if, detail, True, read_back, known)
        )
    return compiled


def _with_returning(made: Any) -> Any:
    """A step's statement as it runs with its RETURNING."""
    return made.returning_statement() if isinstance(made, Write) else made


def _in_lists(clause: Any) -> Any:
    """`x IN (c1, c2, c3, …)` of three or more constants spelled `(x = c1 OR x = c2 OR …)`
    on SQLite, which builds an ephemeral index of such a list on every run (decision 0491).
    The same truth in three-valued logic (the constants are not NULL: NULL only when x is),
    with the same affinity and collation (the left operand's, in both)."""

    def replace(element: Any, **_kw: Any) -> Any:
        if not isinstance(element, BinaryExpression) or element.operator is not operators.in_op:
            return None
        listed = element.right.element if isinstance(element.right, Grouping) else None
        if not isinstance(listed, ClauseList) or len(listed.clauses) < 3:
            return None
        constants = list(listed.clauses)
        for value in constants:
            if not (isinstance(value, ColumnClause) and value.is_literal and value.table is None):
                return None
            if value.name.strip().upper() == "NULL":
                return None
        return or_(*[element.left == value for value in constants]).self_group()

    if not any(replace(element) is not None for element in visitors.iterate(clause)):
        return clause
    return visitors.replacement_traverse(clause, {}, replace)


def _counted(
    write: Write, needed: tuple[str, ...]
) -> tuple[Any, Select[Any] | None, tuple[str, ...]] | None:
    """A step's SQLite spelling without RETURNING (SQLite 3.35+ gathers a RETURNING's rows in
    an ephemeral table, and an INSERT … SELECT with a RETURNING stages the SELECT's rows in
    another): (the write, the read of its row's `needed` columns or None, the bind names
    holding them when the row is the values bound). None: the step keeps its RETURNING.

    - an INSERT (plain or ON CONFLICT DO NOTHING) wrote, when it counted a row, the values it
      was given: a needed column must be a bound input or earlier step's column (`p_`, `s_`)
      of a type SQLite stores and returns unchanged (no bind or result processing);
    - an upsert (ON CONFLICT (target) DO UPDATE) wrote, when it counted a row, the one row of
      its conflict target's values (inserted or updated): read back by that unique target;
    - an UPDATE whose WHERE pins a unique key with equalities on columns it does not SET
      (to bound values or constants) changed, when it counted a row, that one row: read back
      by those equalities (the post-update values, as RETURNING gives)."""
    if isinstance(write.statement, Insert):
        return _counted_insert(write, needed)
    if isinstance(write.statement, Update):
        return _counted_update(write, needed)
    return None


def _returned_by(write: Write) -> dict[str, Any]:
    return {str(c.key): c for c in write.returning_statement().exported_columns}


def _counted_insert(
    write: Write, needed: tuple[str, ...]
) -> tuple[Any, Select[Any] | None, tuple[str, ...]] | None:
    table = write.statement.table
    if not isinstance(table, Table):
        return None
    if not needed:
        return write.statement, None, ()
    values = write.values
    if values is None:
        return None  # several rows: which one RETURNING gives first is the SQL's to say
    returned = _returned_by(write)
    if write.conflict is not None:
        names = write.conflict
        updated = write.updated or frozenset()
        if not names or updated & set(names) or not _unique(table, set(names)):
            return None
        key = []
        for name in names:
            value = values.get(name)
            if value is None or not _fixed(value):
                return None
            key.append(table.c[name] == value)
        read = select(*[returned[column] for column in needed]).where(*key)
        return write.statement, read, ()
    known = []
    for column in needed:
        value = values.get(column)
        plain = column in table.c and _stored_as_bound(table.c[column].type)
        if not (isinstance(value, BindParameter) and plain and value.key[:2] in ("p_", "s_")):
            return None
        known.append(str(value.key))
    return write.statement, None, tuple(known)


def _counted_update(
    write: Write, needed: tuple[str, ...]
) -> tuple[Any, Select[Any] | None, tuple[str, ...]] | None:
    statement = write.statement
    table = statement.table
    if not isinstance(table, Table) or write.updated is None or statement.whereclause is None:
        return None
    assigned = set(write.updated)
    assigned |= {c.name for c in table.c if c.onupdate is not None or c.server_onupdate}
    key = [
        term
        for term in _conjuncts(statement.whereclause)
        if isinstance(term, BinaryExpression)
        and term.operator is operators.eq
        and isinstance(term.left, Column)
        and term.left.table is table
        and term.left.name not in assigned
        and _fixed(term.right)
    ]
    if not _unique(table, {term.left.name for term in key}):
        return None
    returned = _returned_by(write)
    read = select(*[returned[column] for column in needed]).where(*key) if needed else None
    return statement, read, ()


def _conjuncts(clause: Any) -> list[Any]:
    if isinstance(clause, BooleanClauseList) and clause.operator is operators.and_:
        return [term for part in clause.clauses for term in _conjuncts(part)]
    return [clause]


def _fixed(value: Any) -> bool:
    """A bound value or a constant: the same on every read of the statement's run."""
    return isinstance(value, BindParameter) or (
        isinstance(value, ColumnClause) and value.is_literal and value.table is None
    )


def _unique(table: Table, names: set[str]) -> bool:
    """Whether equal values of the columns `names` pick at most one row of `table`."""
    keys = [{c.name for c in table.primary_key.columns}]
    keys += [
        {c.name for c in k.columns} for k in table.constraints if isinstance(k, UniqueConstraint)
    ]
    keys += [
        {c.name for c in i.columns}
        for i in table.indexes
        if i.unique
        and not any(i.dialect_kwargs.get(f"{d}_where") for d in ("sqlite", "postgresql"))
    ]
    return any(key and key <= names for key in keys)


def _stored_as_bound(type_: Any) -> bool:
    """A type whose values SQLite stores and returns as bound (no processing either way)."""
    impl = type_.dialect_impl(_SQLITE)
    return impl.bind_processor(_SQLITE) is None and impl.result_processor(_SQLITE, None) is None


_SQLITE = sqlite.dialect()


def _compile_one_statement(
    program: Program,
    steps: list[Step],
    outputs: tuple[str, ...],
    fresh: tuple[tuple[str, str], ...],
) -> Compiled:
    shared = _one_statement(program, steps, func.pg_advisory_xact_lock_shared)
    exclusive = _one_statement(program, steps, func.pg_advisory_xact_lock)
    return Compiled("postgresql", outputs, fresh, statement=shared, exclusive=exclusive)


def _one_statement(program: Program, steps: list[Step], lock: Any) -> Select[Any]:
    """The program as one statement whose first CTE takes the money lock with `lock` (shared
    alone; exclusive in a group commit, which every program of the group takes again in its
    one transaction: the lock is re-entrant, decisions 0370, 0440)."""
    ctes: dict[str, CTE] = {}
    refs = Refs("postgresql", ctes, {})
    # The money lock, shared: taken before any row lock, so that a group commit (which holds
    # it exclusively) never interleaves its row locks with another money statement's.
    ctes[_MONEY_LOCK_CTE] = select(lock(inline(MONEY_LOCK, BigInteger)).label("locked")).cte(
        _MONEY_LOCK_CTE
    )
    anchor: str | None = _MONEY_LOCK_CTE
    previous: str | None = _MONEY_LOCK_CTE
    for step in steps:
        gates: list[ColumnElement[bool]] = []
        if anchor is not None:
            gates.append(exists().select_from(ctes[anchor]))
        if previous is not None and previous != anchor:
            gates.append(select(func.count()).select_from(ctes[previous]).scalar_subquery() >= 0)
        refs.gate = and_(true(), *gates)
        ctes[step.name] = _with_returning(step.build(refs)).cte(step.name)
        if _anchors(step):
            anchor = step.name
        previous = step.name
    refs.gate = true()
    whens: list[tuple[Any, Any]] = []
    for step in steps:
        missing = ~exists().select_from(ctes[step.name])
        if step.empty is Empty.STOP:
            whens.append((missing, inline(0)))
        elif step.empty is Empty.REFUSE:
            if step.required_if is not None:
                missing = and_(missing, step.required_if(refs))
            whens.append((missing, cast(_tag(step, refs, ctes[step.name]), Integer)))
    ok = select(case(*whens, else_=inline(1)).label("mercato_ok")).subquery("mercato")
    # The outputs come from steps of one row each, joined to the verdict's one row (a step
    # that returned nothing leaves its columns NULL).
    joined: Any = ok
    for name in dict.fromkeys(step for step, _ in program.outputs):
        joined = joined.outerjoin(ctes[name], true())
    columns = [ctes[s].c[c].label(f"{s}__{c}") for s, c in program.outputs]
    return select(ok.c.mercato_ok, *columns).select_from(joined).add_cte(*ctes.values())


def _tag(step: Step, refs: Refs, cte: CTE) -> Any:
    parts: list[Any] = [inline(f"{REFUSAL_TAG}|{step.code}|", Text)]
    for value in step.detail(refs) if step.detail is not None else ():
        parts += [cast(value, Text), inline("|", Text)]
    # A count read at run time: the text is never a constant the planner could fold (and fail).
    parts.append(cast(select(func.count()).select_from(cte).scalar_subquery(), Text))
    return func.concat(*parts)


@lru_cache(maxsize=256)
def compiled(program: Program, dialect: str) -> Compiled:
    """`compile_program`, memoized: each program is built once per dialect."""
    return compile_program(program, dialect)
