"""Plans: a unit of database work written once, run on a sync Session or an async connection.

A plan is a generator that yields operations and receives their results:

- `Rows(statement, params)` → the rows as a list of tuples (`[]` for a statement that returns
  none; `params` may be a list of mappings for an executemany);
- `Run(program, params)` → a guarded money program's outputs (`mercato.db.guarded`): a dict,
  or None when it stopped. A refusal is the error the plan gives with it (`Run.refusal`: its
  domain's, written where the rule is), raised where the runner finds it and out of the plan;
  without one, it is thrown into the plan as `guarded.Refused`.

Statements are SQLAlchemy Core, built once at module level (building costs more than running).
Each domain module writes a read or write once, as a plan, and decorates it with `@query`:

    @query
    def find_by_key(*, account_id: str, idempotency_key: str) -> Plan[InvocationView | None]:
        row = first((yield Rows(_FIND_BY_KEY, {"account_id": account_id, ...})))
        return None if row is None else _view(row)

    view = find_by_key(session, account_id=a, idempotency_key=k)            # sync Session
    view = await find_by_key.aio(conn, account_id=a, idempotency_key=k)     # async connection

The sync side runs on `Database` (SQLAlchemy sessions: the routes that are not hot, the CLI,
the tests' set-up); the async side on an `AsyncDatabase` (`mercato.db.aio`: the invoke path
and the worker), which runs the same compiled statements on the bare driver. Only how a
statement is executed differs; what it says, and what its rows mean, is written once.

Driver errors surface as SQLAlchemy's `DBAPIError` family on both sides (`IntegrityError`,
`OperationalError`, … with the driver's exception, and its `sqlstate`, as `.orig`), so callers
catch one set of exceptions whichever side ran the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Protocol, TypeAlias, TypeVar

from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable

from mercato.db import guarded, runner

T = TypeVar("T")
P = ParamSpec("P")

Row: TypeAlias = tuple[Any, ...]
Params: TypeAlias = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True, slots=True)
class Rows:
    """Execute `statement` with `params`; the plan receives `list[Row]`."""

    statement: Executable
    params: Params = None


@dataclass(frozen=True, slots=True)
class Run:
    """Run a guarded money program; the plan receives its outputs (None: it stopped). A
    refusal raises `refusal`'s error out of the plan, or, without one, `guarded.Refused` is
    thrown into it."""

    program: guarded.Program
    params: Mapping[str, Any]
    last: bool = False
    """Nothing follows this operation in its plan, whatever it answers: a plan whose first
    operation it is is one statement, and `AsyncDatabase.write` runs it alone (PostgreSQL:
    autocommit; both: with the loop's other money programs), not in a transaction."""
    refusal: guarded.Refusal | None = None
    """What a refusal of the program raises (the domain's error for the `Refused`), raised
    where the runner finds it; None: `guarded.Refused`, thrown into the plan."""


Op: TypeAlias = Rows | Run
Plan: TypeAlias = Generator[Op, Any, T]


def first(rows: list[Row]) -> Row | None:
    """The first row, or None."""
    return rows[0] if rows else None


def scalar(rows: list[Row]) -> Any:
    """The first column of the first row, or None."""
    return rows[0][0] if rows else None


# --- the sync side ------------------------------------------------------------------------


def execute_sync(session: Session, op: Op) -> Any:
    """One operation on a sync SQLAlchemy session."""
    if isinstance(op, Run):
        return runner.run(session, op.program, op.params, op.refusal)
    result = session.execute(op.statement, op.params)
    # A statement without rows (a DML without RETURNING) comes back as a closed cursor result;
    # the ORM's results of a SELECT always have rows.
    if not getattr(result, "returns_rows", True):
        return []
    return [tuple(row) for row in result]


def run_sync(session: Session, plan: Plan[T]) -> T:
    """Drive `plan` to its end on `session`; its return value."""
    try:
        op = next(plan)
        while True:
            try:
                result = execute_sync(session, op)
            except guarded.Refused as refused:
                op = plan.throw(refused)
                continue
            op = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


# --- the async side -----------------------------------------------------------------------


class AsyncConnection(Protocol):
    """A connection of an `AsyncDatabase` inside one unit of work (read, transaction or
    statement). `execute` runs one operation as `execute_sync` does."""

    async def execute(self, op: Op) -> Any: ...


class AsyncDatabase(Protocol):
    """The async twin of `mercato.db.uow.Database`: the same three units of work."""

    dialect: str
    """"postgresql" or "sqlite"."""

    def read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Reads only; PostgreSQL: autocommit; SQLite: one DEFERRED snapshot."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """One transaction (SQLite: BEGIN IMMEDIATE); commit on success, roll back on error."""
        ...

    def statement(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Exactly one write statement, atomic on its own (PostgreSQL: autocommit, a money
        program's one data-modifying CTE); on SQLite a transaction."""
        ...

    async def write(self, plan: Callable[[], Plan[T]]) -> T:
        """Run the plan `plan()` makes as one unit of work: alone when its first operation is
        a `Run` marked `last` (`statement()`), else in a `transaction()`; made and run again
        from scratch when PostgreSQL chose it as the victim of a deadlock or serialization
        failure (it was rolled back whole)."""
        ...

    async def close(self) -> None: ...


async def run_async(conn: AsyncConnection, plan: Plan[T], op: Op | None = None) -> T:
    """Drive `plan` (which asked for `op` already, when given) to its end on an async
    connection; its return value."""
    try:
        if op is None:
            op = next(plan)
        while True:
            try:
                result = await conn.execute(op)
            except guarded.Refused as refused:
                op = plan.throw(refused)
                continue
            op = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


# --- written once, called from either side ----------------------------------------------


class Query(Generic[P, T]):
    """A plan-returning function, callable on a sync session (`q(session, …)`) or awaited on
    an async connection (`await q.aio(conn, …)`)."""

    def __init__(self, plan: Callable[P, Plan[T]]) -> None:
        self.plan = plan
        self.__doc__ = plan.__doc__
        self.__name__ = getattr(plan, "__name__", "query")
        self.__wrapped__ = plan

    def __call__(self, session: Session, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(session, self.plan(*args, **kwargs))

    async def aio(self, conn: AsyncConnection, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(conn, self.plan(*args, **kwargs))


def query(plan: Callable[P, Plan[T]]) -> Query[P, T]:
    """Decorate a plan function so that both sides can call it (see the module docstring)."""
    return Query(plan)
