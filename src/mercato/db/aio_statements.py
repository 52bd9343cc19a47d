"""Core statements compiled once for a bare driver, and the driver's errors as SQLAlchemy's.

The async drivers (`mercato.db.aio`) execute SQLAlchemy Core statements without SQLAlchemy's
execution machinery: each statement is compiled once for the driver's dialect (`$n` for
asyncpg, `?` for sqlite3) and kept with its bind order and the bind and result processors of
its types, so the values sent and the rows read back are exactly the ones a sync Session sends
and reads (a `UTCDateTime` is made UTC on the way in and aware on the way out, JSON is
serialised and parsed, …).

A statement is found by identity (decision 0321): one built once (at module level, or once
per shape in a module's own cache, as every statement of the invoke path and the worker is) is
compiled once; one built per call (the MCP tool list's) is compiled per call. A bounded LRU
holds what was compiled, in a mapping that forgets a statement when it is garbage-collected.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import ValuesBase

Processor = Callable[[Any], Any]
_MISSING = object()
_NO_PARAMS: Mapping[str, Any] = {}


class Prepared:
    """One statement compiled for one dialect: its SQL and how to bind and read it."""

    __slots__ = (
        "__weakref__",
        "_defaults",
        "_keys",
        "_makers",
        "_pick",
        "_result_processors",
        "_results",
        "_static",
        "bind_processors",
        "binds",
        "by_name",
        "compiled",
        "dml_without_rows",
        "expanding",
        "sql",
    )

    def __init__(self, compiled: SQLCompiler, dialect: Dialect) -> None:
        self.compiled = compiled
        self.sql: str = compiled.string
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        binds: list[tuple[str, Any, bool, Callable[[], Any] | None, Processor | None]] = []
        for name in compiled.positiontup or ():
            bind = by_name[name]
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            binds.append((bind.key, bind.value, bool(bind.required), bind.callable, process))
        self.binds = tuple(binds)
        """(key, own value, required, maker, bind processor) of each placeholder, in order."""
        # The hot path's shape of the same facts: the values are picked by key in one C call
        # and only the positions whose type processes a value are visited.
        keys = tuple(bind[0] for bind in binds)
        self._pick: Callable[[Mapping[str, Any]], Any] | None = (
            itemgetter(*keys) if len(keys) > 1 else None
        )
        self._keys = keys
        self._defaults = False
        """Some value was missing from the parameters once: fill missing ones per call."""
        static: dict[str, Any] = {}
        makers: dict[str, Callable[[], Any]] = {}
        for key, default, required, make, _process in binds:
            if make is not None:
                makers[key] = make
            elif not required:
                static[key] = default
        self._static = static
        """The statement's own values (its literals), taken when the parameters lack them."""
        self._makers = tuple(makers.items())
        """The binds whose missing value is made per call, in placeholder order."""
        self.bind_processors = tuple(
            (index, bind[4]) for index, bind in enumerate(binds) if bind[4] is not None
        )
        self.by_name: dict[str, Processor] = {
            name: bind[4]
            for name, bind in zip(compiled.positiontup or (), binds, strict=True)
            if bind[4] is not None
        }
        """The bind processor of each placeholder's name (the expanding path's)."""
        self._results: tuple[Processor | None, ...] = tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in _result_columns(compiled)
        )
        self._result_processors = tuple(
            (index, process) for index, process in enumerate(self._results) if process is not None
        )
        self.expanding = bool(compiled.post_compile_params or compiled.literal_execute_params)
        self.dml_without_rows = bool(
            (compiled.isinsert or compiled.isupdate or compiled.isdelete)
            and not compiled.effective_returning
        )

    def bind(self, params: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
        """The SQL to send and its positional values for `params`."""
        if self.expanding:
            return self._bind_expanding(params)
        given = params or _NO_PARAMS
        if self._defaults:
            values = self._with_defaults(given)
        else:
            try:
                pick = self._pick
                values = list(pick(given)) if pick is not None else [given[k] for k in self._keys]
            except KeyError:
                # A statement with literal values of its own (or optional parameters): take
                # the loop that fills them from now on rather than raise on every call.
                self._defaults = True
                values = self._with_defaults(given)
        for index, process in self.bind_processors:
            values[index] = process(values[index])
        return self.sql, values

    def _with_defaults(self, given: Mapping[str, Any]) -> list[Any]:
        """The values of `given`, a missing one made by its bind's callable or taken from the
        statement (its own value, or an error when it is required); not yet processed."""
        merged = {**self._static, **given}
        for key, make in self._makers:
            if key not in given:
                merged[key] = make()
        try:
            pick = self._pick
            return list(pick(merged)) if pick is not None else [merged[k] for k in self._keys]
        except KeyError:
            for key in self._keys:
                if key not in merged:
                    raise exc.InvalidRequestError(
                        f"A value is required for bind parameter {key!r}"
                    ) from None
            raise

    def _bind_expanding(self, params: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
        compiled = self.compiled
        # By bind name, unescaped: `construct_expanded_state` takes them back by that name.
        constructed = compiled.construct_params(
            dict(params) if params else None, escape_names=False
        )
        # Expanding IN: SQLAlchemy renders the list's placeholders for these values.
        expanded = compiled.construct_expanded_state(constructed)
        named = expanded.parameters
        # The expanded state's processors are only the expanded lists' elements' (as
        # SQLAlchemy's execution context merges them): the other binds keep their own.
        processors = {**self.by_name, **expanded.processors}
        out = []
        for name in expanded.positiontup or ():
            value = named[name]
            convert = processors.get(name)
            out.append(value if convert is None else convert(value))
        return expanded.statement, out

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        """A driver row as the tuple a Session returns (result processors applied)."""
        processors = self._result_processors
        if not processors or len(raw) != len(self._results):
            # Nothing to convert, or a textual statement: no types to apply.
            return raw if type(raw) is tuple else tuple(raw)
        values = list(raw)
        for index, process in processors:
            value = values[index]
            if value is not None:
                values[index] = process(value)
        return tuple(values)

    def rows(self, raw: list[Any]) -> list[tuple[Any, ...]]:
        """`row` of every driver row (a list of tuples without conversions comes back as is)."""
        if not self._result_processors and all(type(one) is tuple for one in raw):
            return raw
        row = self.row
        return [row(one) for one in raw]


class ProgramStatement:
    """A money program's statement compiled for a bare driver (`runner.Runnable`'s form of a
    clause on `aio_sqlite` and `aio_postgres`): its SQL and the keys of its values in a run's
    values (`runner.Literals.key`), in placeholder order, picked in one C call. The same
    values `Prepared.bind` gives (same processors).

    A value is processed once per run and type (`done`): a program binds the same object (its
    `now`, a row's timestamps that are that `now`) in several places and steps, and a type's
    bind processor is a pure function of the value (SQLite's datetime formatting costs about
    2.5 µs a call)."""

    __slots__ = ("names", "pick", "prepared", "processors", "sql")

    def __init__(self, clause: ClauseElement, literals: Any, dialect: Dialect) -> None:
        compiled = clause.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        prepared = self.prepared = Prepared(compiled, dialect)
        if prepared.expanding:
            raise exc.InvalidRequestError("a money program's statement cannot expand its binds")
        self.sql = prepared.sql
        keys = [literals.key(*bind[:4]) for bind in prepared.binds]
        self.names = dict(zip(keys, (bind[0] for bind in prepared.binds), strict=True))
        """The bind name of each key (for the error of a missing value)."""
        self.pick: Callable[[Mapping[str, Any]], Any] = (
            itemgetter(*keys) if len(keys) > 1 else _pick_list(keys)
        )
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        positions = compiled.positiontup or ()
        self.processors = tuple(
            (index, process, _type_key(by_name[positions[index]].type))
            for index, process in prepared.bind_processors
        )
        """(position, processor, a key equal for equal types)."""

    def values(self, values: Mapping[str, Any], done: dict[Any, Any]) -> Sequence[Any]:
        """The values to send for a run's `values`, `done` holding the values this run
        processed already."""
        try:
            picked = self.pick(values)
        except KeyError:
            missing = next(key for key in self.names if key not in values)
            raise exc.InvalidRequestError(
                f"A value is required for bind parameter {self.names[missing]!r}"
            ) from None
        if not self.processors:
            return picked  # type: ignore[no-any-return]
        out = list(picked)
        for index, process, kind in self.processors:
            value = out[index]
            # By the value's identity: `done` holds the value too, so no other object can
            # take its id before the run ends.
            key = (kind, id(value))
            found = done.get(key)
            if found is None:
                found = done[key] = (value, process(value))
            out[index] = found[1]
        return out


def _type_key(type_: Any) -> tuple[type, str]:
    """A key equal for equal types: the class and the constructor arguments its repr shows."""
    return type(type_), repr(type_)


def _pick_list(keys: list[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    return lambda values: tuple([values[key] for key in keys])


def _result_columns(compiled: SQLCompiler) -> Sequence[Any]:
    """The columns of the rows `compiled` returns, in order (none for a textual statement)."""
    if compiled.isinsert or compiled.isupdate or compiled.isdelete:
        return compiled.effective_returning or ()
    return getattr(compiled.statement, "selected_columns", None) or ()


class Statements:
    """The compiled statements of one dialect (see the module docstring).

    Only a bounded LRU holds compiled statements (and, through them, the statements they were
    compiled from); the identity map in front of it holds weak references only, so a statement
    built per call, and its entry, go away with it once the LRU lets it go."""

    def __init__(self, dialect: Dialect, *, per_call_limit: int = 1000) -> None:
        self.dialect = dialect
        self._by_identity: dict[int, tuple[weakref.ref[Any], dict[Any, weakref.ref[Prepared]]]] = {}
        self._compiled: OrderedDict[Any, Prepared] = OrderedDict()
        self._limit = per_call_limit

    def prepare(self, statement: Any, params: Any = None) -> Prepared:
        """The compiled form of `statement` for `params` (a mapping, a list of them for an
        executemany, or None)."""
        columns: tuple[str, ...] | None = None
        if isinstance(statement, ValuesBase):
            # An INSERT or UPDATE without values() names the columns it is executed with, as
            # SQLAlchemy compiles it for the keys of the (first) parameter set.
            first = params if params is None or isinstance(params, Mapping) else params[0]
            columns = tuple(sorted(first)) if first else ()
        entry = self._by_identity.get(id(statement))
        if entry is not None and entry[0]() is statement:
            known = entry[1].get(columns)
            if known is not None:
                prepared = known()
                if prepared is not None:
                    return prepared
        prepared = self._compile(statement, columns)
        compiled = self._compiled
        compiled[(id(statement), columns)] = prepared
        if len(compiled) > self._limit:
            compiled.popitem(last=False)
        self._remember(statement, columns, prepared)
        return prepared

    def _remember(
        self, statement: Any, columns: tuple[str, ...] | None, prepared: Prepared
    ) -> None:
        ident = id(statement)
        by_identity = self._by_identity
        entry = by_identity.get(ident)
        if entry is None or entry[0]() is not statement:

            def forget(ref: weakref.ref[Any]) -> None:
                current = by_identity.get(ident)
                if current is not None and current[0] is ref:
                    del by_identity[ident]

            entry = by_identity[ident] = (weakref.ref(statement, forget), {})
        entry[1][columns] = weakref.ref(prepared)

    def _compile(self, statement: ClauseElement, columns: tuple[str, ...] | None) -> Prepared:
        compiled = statement.compile(
            dialect=self.dialect, column_keys=None if columns is None else list(columns)
        )
        assert isinstance(compiled, SQLCompiler)
        return Prepared(compiled, self.dialect)


# --- driver errors as SQLAlchemy's ---------------------------------------------------------

# PostgreSQL SQLSTATE classes → the DB-API class psycopg raises for them (so the sync and the
# async side raise the same SQLAlchemy class for the same failure).
_PG_CLASSES: dict[str, type[exc.DBAPIError]] = {
    "08": exc.OperationalError,  # connection exception
    "0A": exc.NotSupportedError,
    "22": exc.DataError,
    "23": exc.IntegrityError,
    "25": exc.InternalError,  # invalid transaction state
    "26": exc.ProgrammingError,
    "28": exc.OperationalError,  # invalid authorization
    "2B": exc.InternalError,
    "2D": exc.InternalError,
    "34": exc.ProgrammingError,
    "3D": exc.ProgrammingError,
    "3F": exc.ProgrammingError,
    "40": exc.OperationalError,  # serialization failure, deadlock
    "42": exc.ProgrammingError,
    "44": exc.ProgrammingError,
    "53": exc.OperationalError,  # insufficient resources
    "54": exc.OperationalError,
    "55": exc.OperationalError,
    "57": exc.OperationalError,  # operator intervention (query cancelled, admin shutdown)
    "58": exc.OperationalError,
    "F0": exc.InternalError,
    "HV": exc.OperationalError,
    "P0": exc.InternalError,  # PL/pgSQL RAISE (the ledger's append-only triggers)
    "XX": exc.InternalError,
}


def sqlalchemy_error(error: BaseException, sql: str | None) -> exc.DBAPIError:
    """`error` (a driver's exception) as the SQLAlchemy exception a sync Session raises for
    it, with `error` as `.orig` (PostgreSQL's carries `.sqlstate`). Parameters are never
    rendered into the message."""
    kind = _error_class(error)
    invalidated = kind is exc.OperationalError and _is_disconnect(error)
    return kind(sql, None, error, hide_parameters=True, connection_invalidated=invalidated)


def _error_class(error: BaseException) -> type[exc.DBAPIError]:
    if isinstance(error, sqlite3.Error):
        for driver_kind, kind in _SQLITE_CLASSES:
            if isinstance(error, driver_kind):
                return kind
        return exc.DBAPIError
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        return _PG_CLASSES.get(sqlstate[:2], exc.DatabaseError)
    if _is_disconnect(error):
        return exc.OperationalError
    name = type(error).__name__
    if name == "DataError":  # asyncpg: a value its codec cannot encode
        return exc.DataError
    return exc.InterfaceError


def _is_disconnect(error: BaseException) -> bool:
    if isinstance(error, OSError | TimeoutError):
        return True
    name = type(error).__name__
    if name == "ConnectionDoesNotExistError":
        return True
    return name == "InterfaceError" and "closed" in str(error).lower()


def _sqlite_classes() -> list[tuple[type[BaseException], type[exc.DBAPIError]]]:
    return [
        (sqlite3.IntegrityError, exc.IntegrityError),
        (sqlite3.OperationalError, exc.OperationalError),
        (sqlite3.DataError, exc.DataError),
        (sqlite3.ProgrammingError, exc.ProgrammingError),
        (sqlite3.NotSupportedError, exc.NotSupportedError),
        (sqlite3.InternalError, exc.InternalError),
        (sqlite3.InterfaceError, exc.InterfaceError),
        (sqlite3.DatabaseError, exc.DatabaseError),
    ]


_SQLITE_CLASSES = _sqlite_classes()
