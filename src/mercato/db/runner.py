"""The program runner: how a guarded money program runs, written once and sans IO (decision 0564).

`mercato.db.guarded` compiles a program into statements; this module says what is sent, in
which order, and what the answers mean. It sends nothing itself: `Runnable.run(values)` is a
generator that yields `(kind, statement)` and is sent the answer, as a plan (`mercato.db.plans`)
yields its operations. An executor (the sync Session here, `aio_sqlite`, `aio_postgres`) only
sends: it makes each compiled statement its own form once (`Runnable(program, dialect, make)`),
binds it with the run's values and answers

- `FIRST`: the statement's first row as a tuple, or None when it returned none;
- `COUNT`: the number of rows the write changed (a `counted` step, no RETURNING);

and throws a driver error into the generator as SQLAlchemy's `DBAPIError` (with the driver's
exception, and its SQLSTATE, as `.orig`). What the runner alone owns:

- the values of a run (`Runnable.values`): the inputs by their own names, the statements' own
  literals, a fresh id (from the bound ids) for each `Step.fresh` input not given;
- the step loop (SQLite, `Compiled.steps`): a counted step is empty when its write changed no
  row, else its row is `read` back or is the values it inserted (`known`); each step's row is
  bound for the steps after it (`s_<step>_<column>`, NULL when empty); an empty STOP step ends
  the run with None, an empty SKIP step goes on, an empty REFUSE step reads `required_if` and
  its `detail` and refuses;
- the one statement (PostgreSQL, `Compiled.statement`): its row is `mercato_ok` (0 stopped, 1
  done) and the outputs; the refusal it aborts with (SQLSTATE 22P02, the text
  `mercato-refusal|<code>|<detail>|…`) is a refusal;
- what a refusal raises: the caller's error for it (`guarded.Refusal`, the domain's
  `MercatoError`, given with the run), else `guarded.Refused`.

Outputs come back as `{"<step>.<column>": value}`. `run(session, program, params)` runs a program
on a sync SQLAlchemy Session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping, Sequence
from operator import itemgetter
from typing import Any, Generic, TypeAlias, TypeVar

from sqlalchemy.exc import DBAPIError, InvalidRequestError
from sqlalchemy.orm import Session

from mercato.core.ids import new_id
from mercato.db import guarded
from mercato.db.uow import one_statement

S = TypeVar("S")

FIRST = 0
"""Send the statement; answer its first row (a tuple), or None."""
COUNT = 1
"""Send the write; answer the number of rows it changed."""

Send: TypeAlias = tuple[int, Any]
Outputs: TypeAlias = dict[str, Any] | None

_REFUSAL = re.compile(guarded.REFUSAL_TAG + r"\|([A-Za-z0-9_-]+)\|((?:[^|\"]*\|)*)\d+")
_INVALID_TEXT = "22P02"


def parse_refusal(message: str) -> guarded.Refused | None:
    """The refusal a PostgreSQL error message carries (None: not a refusal)."""
    found = _REFUSAL.search(message)
    if found is None:
        return None
    detail = tuple(value or None for value in found.group(2).split("|")[:-1])
    return guarded.Refused(found.group(1), detail)


def refusal_of(error: BaseException) -> guarded.Refused | None:
    """The refusal a driver error (SQLAlchemy's form, or the driver's own) carries, or None."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    if getattr(orig, "sqlstate", None) != _INVALID_TEXT:
        return None
    return parse_refusal(str(orig))


def _picker(keys: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    if len(keys) > 1:
        return itemgetter(*keys)
    if keys:
        key = keys[0]
        return lambda values: (values[key],)
    return lambda _values: ()


class Literals:
    """The values a program's statements hold themselves (a literal's `param_1`, a default made
    per run), which an executor that binds by position takes into a run's values (`own`), and
    the inputs a statement gives a default or a maker. Filled while `Runnable` is made."""

    __slots__ = ("consts", "defaults", "makers")

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}
        self.defaults: dict[str, Any] = {}
        self.makers: dict[str, Callable[[], Any]] = {}

    def key(self, bind: str, value: Any, required: bool, make: Callable[[], Any] | None) -> str:
        """The key of bind parameter `bind` in a run's values: an input (`p_<name>`) by its own
        name, an earlier step's column (`s_…`) as it is, any other under a key of its own."""
        if bind.startswith("s_"):
            return bind
        if bind.startswith("p_"):
            key = bind[2:]
            if make is not None:
                self.makers.setdefault(key, make)
            elif not required:
                self.defaults.setdefault(key, value)
            return key
        key = f"{len(self.consts) + len(self.makers)}:{bind}"
        if make is not None:
            self.makers[key] = make
        elif required:
            raise InvalidRequestError(
                f"A value is required for bind parameter {bind!r} (a program's inputs are "
                "bound with Refs.param)"
            )
        else:
            self.consts[key] = value
        return key


Make: TypeAlias = Callable[[Any, Literals], S]
"""An executor's form of one compiled clause, made once (its keys from `Literals.key`)."""


class RunStep(Generic[S]):
    """One step of a SQLite program in an executor's form."""

    __slots__ = (
        "code",
        "counted",
        "detail",
        "empty",
        "known",
        "names",
        "read",
        "required_if",
        "send",
    )

    def __init__(self, item: guarded.CompiledStep, make: Make[S], literals: Literals) -> None:
        def made(clause: Any) -> Send | None:
            return None if clause is None else (FIRST, make(clause, literals))

        self.counted = item.counted
        self.send: Send = (COUNT if item.counted else FIRST, make(item.statement, literals))
        """What the run yields for its statement (made once: a run yields it as it is)."""
        self.required_if = made(item.required_if)
        self.detail = made(item.detail)
        self.read = made(item.read)
        self.known = _picker([literals.key(name, None, True, None) for name in item.known])
        """A counted step's row without `read`: the values it inserted, from a run's values."""
        self.empty = item.step.empty
        self.code = item.step.code
        self.names = tuple(f"s_{item.step.name}_{column}" for column in item.columns)
        """The keys of the columns it returns, for the steps after it."""


class Runnable(Generic[S]):
    """A program compiled for `dialect`, each statement in an executor's form (`make`)."""

    __slots__ = (
        "exclusive",
        "fresh",
        "literals",
        "outputs",
        "pick_outputs",
        "program",
        "statement",
        "steps",
    )

    def __init__(self, program: guarded.Program, dialect: str, make: Make[S]) -> None:
        built = guarded.compiled(program, dialect)
        self.program = program
        self.literals = literals = Literals()
        self.statement: S | None = None
        """PostgreSQL: the program's one statement."""
        self.exclusive: S | None = None
        """PostgreSQL: the same statement taking the money lock exclusively (a group's)."""
        self.steps: tuple[RunStep[S], ...] = ()
        """SQLite: each step, its statements in the executor's form."""
        if built.statement is not None:
            self.statement = make(built.statement, literals)
            # Sent with the values bound for `statement` (its own literals are not a run's).
            self.exclusive = make(built.exclusive, Literals())
        else:
            self.steps = tuple(RunStep(item, make, literals) for item in built.steps)
        self.fresh = tuple((name[2:], prefix) for name, prefix in built.fresh)
        self.outputs = built.outputs
        self.pick_outputs = _picker(["s_" + name.replace(".", "_", 1) for name in built.outputs])

    def values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A run's values: the inputs `params` (by their own names), the statements' own
        literals (no input replaces one), a fresh id for each fresh input not given."""
        literals = self.literals
        values = {**literals.defaults, **params} if literals.defaults else dict(params)
        values.update(literals.consts)
        for name, prefix in self.fresh:
            if name not in values:
                values[name] = new_id(prefix)
        for name, make in literals.makers.items():
            if name not in values:
                values[name] = make()
        return values

    def run(
        self, values: dict[str, Any], refusal: guarded.Refusal | None = None
    ) -> Generator[Send, Any, Outputs]:
        """The program's run on `values` (see the module docstring): its outputs, or None
        when it stopped; raises a refusal as `refusal` makes it (else `guarded.Refused`). A
        rerun with the same `values` sends what the first sent (a step's columns are set
        before a later step reads them)."""
        if self.statement is not None:
            try:
                answered = yield FIRST, self.statement
            except DBAPIError as error:
                refused = refusal_of(error)
                if refused is None:
                    raise
                raise (refused if refusal is None else refusal(refused)) from None
            return self.answer(answered)
        for step in self.steps:
            row: Any
            if not step.counted:
                row = yield step.send
            elif (yield step.send) <= 0:
                row = None
            elif step.read is not None:
                row = yield step.read
                if row is None:  # the row it wrote, by a unique key: never missing
                    raise AssertionError(f"step {step.names}: the row written is missing")
            else:
                row = step.known(values)
            if row is not None:
                values.update(zip(step.names, row, strict=True))
                continue
            if step.empty is guarded.Empty.STOP:
                return None
            if step.empty is guarded.Empty.REFUSE:
                required = True
                if step.required_if is not None:
                    found = yield step.required_if
                    required = bool(found[0]) if found is not None else False
                if required:
                    detail: Sequence[Any] = ()
                    if step.detail is not None:
                        detail = (yield step.detail) or ()
                    refused = guarded.Refused(
                        step.code, tuple(None if v is None else str(v) for v in detail)
                    )
                    raise refused if refusal is None else refusal(refused)
            for name in step.names:
                values[name] = None
        return dict(zip(self.outputs, self.pick_outputs(values), strict=True))

    def answer(self, row: Sequence[Any]) -> Outputs:
        """The outputs of the one statement's row (None: the program stopped)."""
        if row[0] == 0:
            return None
        return dict(zip(self.outputs, row[1:], strict=True))


class Programs(Generic[S]):
    """The `Runnable` of each program for one executor, made at its first run and kept by the
    program's identity (programs are module constants; of those built per call, as tests do,
    at most `limit` are kept)."""

    def __init__(
        self,
        dialect: str,
        make: Make[S],
        *,
        check: Callable[[Runnable[S]], None] | None = None,
        limit: int = 256,
    ) -> None:
        self._dialect = dialect
        self._make = make
        self._check = check
        """Called with each `Runnable` made, before it is kept (the executor's own checks)."""
        self._limit = limit
        self._found: dict[int, Runnable[S]] = {}

    def __call__(self, program: guarded.Program) -> Runnable[S]:
        found = self._found.get(id(program))
        if found is None or found.program is not program:
            if len(self._found) >= self._limit:
                self._found.clear()
            found = Runnable(program, self._dialect, self._make)
            if self._check is not None:
                self._check(found)
            self._found[id(program)] = found
        return found


def drive(run: Generator[Send, Any, Outputs], send: Callable[[int, Any], Any]) -> Outputs:
    """Run `run` to its end, `send(kind, statement)` answering each of its sends (a driver
    error it raises as SQLAlchemy's goes into the run, which may make it a refusal)."""
    try:
        kind, statement = next(run)
        while True:
            try:
                answer = send(kind, statement)
            except DBAPIError as error:
                kind, statement = run.throw(error)
                continue
            kind, statement = run.send(answer)
    except StopIteration as stop:
        outputs: Outputs = stop.value
        return outputs


# --- the sync Session -----------------------------------------------------------------------


class _SessionStatement:
    """A clause compiled for a Session's dialect, with the keys of the run's values its bind
    parameters take (the statements' own values SQLAlchemy fills itself)."""

    __slots__ = ("compiled", "names")

    def __init__(self, clause: Any, literals: Literals, dialect: Any) -> None:
        self.compiled = clause.compile(dialect=dialect)
        self.names = tuple(
            (bind.key, literals.key(bind.key, bind.value, True, None))
            for bind in self.compiled.binds.values()
            if bind.key.startswith(("p_", "s_"))
        )

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {name: values[key] for name, key in self.names if key in values}


_SESSION_PROGRAMS: dict[tuple[str, str], Programs[_SessionStatement]] = {}


def sync_runnable(program: guarded.Program, dialect: Any) -> Runnable[_SessionStatement]:
    """`program` compiled for a sync Session of `dialect`, once."""
    key = (dialect.name, dialect.driver)
    programs = _SESSION_PROGRAMS.get(key)
    if programs is None:
        programs = _SESSION_PROGRAMS[key] = Programs(
            dialect.name, lambda clause, literals: _SessionStatement(clause, literals, dialect)
        )
    return programs(program)


def run(
    session: Session,
    program: guarded.Program,
    params: Mapping[str, Any],
    refusal: guarded.Refusal | None = None,
) -> Outputs:
    """Run `program` in `session` (its outputs; None when it stopped); a refusal raises as
    `refusal` makes it (else `guarded.Refused`)."""
    runnable = sync_runnable(program, session.get_bind().dialect)
    values = runnable.values(params)
    if runnable.statement is not None:
        one_statement(session)
    connection = session.connection()

    def send(kind: int, statement: _SessionStatement) -> Any:
        result = connection.execute(statement.compiled, statement.params(values))
        if kind == COUNT:
            return result.rowcount
        row = result.first()
        return None if row is None else tuple(row)

    return drive(runnable.run(values, refusal), send)
