"""Hints: what the hot invoke keeps in memory per serve process, and the rule that keeps it
honest (decision 0400).

The invoke reads the caller's API key (its principal) and the version's invocable facts (the
version and its holds, its connection's dispatch target, the caller's quota policy) on every
call. A serve process keeps what it read in a `Hints` memo, so that the next call reads
nothing. What it keeps is only a hint; the rule, written once here for both stores:

1. **One generation.** The one-row table `hint_generation` counts the changes to anything a
   hint is made of. Every write that changes a watched row (`WATCHED`: API keys, accounts,
   listings, versions, holds, provider connections, quota overrides) adds one to it in the
   same transaction: the ORM does it at each flush that changes such a row (`_bump_on_flush`,
   registered on every Session), so a new writer cannot forget it. A Core statement that
   writes a watched table (none does today but the key-use touch and the spend-limit use,
   which no hint depends on) must `bump` itself.
2. **Hints of one generation.** A `Hints` memo holds entries of one generation only, read
   after that generation was (`generation_plan` first, then the facts, in the same read): an
   entry is never older than the generation it is filed under. Seeing a newer generation
   drops every entry.
3. **The money write decides.** A call served from memory carries the generation of what it
   used (`Served`, noted on its read unit). Its accept program's first step (`guard_step`) runs
   only while `hint_generation` still holds that value; otherwise the program stops, writes
   nothing, and the engine drops its hints and does the call again the uncached way, which
   answers exactly as it would have (a revoked key: 401; a held listing: 403; …). So a change
   committed before an invoke's accept governs that invoke, in every process sharing the
   database, without any clock or TTL: PostgreSQL's statement (READ COMMITTED, a fresh
   snapshot per statement) and SQLite's BEGIN IMMEDIATE transaction both read the committed
   generation at the moment they write.

Admin writes serialise on the generation row (they are rare); the hot path only reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import BigInteger, Integer, Table, event, func, inspect, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstanceState, Mapped, Session, UOWTransaction, mapped_column

from mercato.db.base import Base
from mercato.db.guarded import Empty, Refs, Step
from mercato.db.plans import Plan, Rows, query, scalar

V = TypeVar("V")

WATCHED: dict[str, frozenset[str] | None] = {
    "accounts": frozenset({"is_staff"}),
    "api_keys": frozenset({"account_id", "digest", "revoked_at"}),  # not its last use
    "listings": None,
    "versions": None,
    "holds": None,
    "provider_connections": None,
    "quota_overrides": None,
}
"""The tables a hint is made of, with the columns whose change moves the generation (None:
any). A deleted row moves it too; a new row only where it changes what an existing one means
(`NEW_ROWS_MATTER`: a hold makes its listing unavailable, an override replaces the default
policy); a new key, account, listing, version or connection is in no memory yet."""

NEW_ROWS_MATTER = frozenset({"holds", "quota_overrides"})

MAX_ENTRIES = 4096
"""Per memo: past it, the memo starts again empty (a bound, not a policy)."""


class HintGeneration(Base):
    """One row (id 1): how many times a watched table changed (decision 0400)."""

    __tablename__ = "hint_generation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


_table = cast(Table, HintGeneration.__table__)
_GENERATION = select(_table.c.value).where(_table.c.id == 1)


def _bump_statement(dialect: str) -> Any:
    # An upsert, not an UPDATE: a missing row (a table emptied by hand) must never swallow a
    # change; it counts from 0 like the read (`generation_plan`) and the guard do.
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(_table).values(id=1, value=1)
    return statement.on_conflict_do_update(
        index_elements=[_table.c.id], set_={"value": _table.c.value + 1}
    )


_BUMPS = {dialect: _bump_statement(dialect) for dialect in ("postgresql", "sqlite")}


@query
def generation_plan() -> Plan[int]:
    """The committed generation (0 before the first change). Read it before the facts a hint
    will be made of, in the same read."""
    value = scalar((yield Rows(_GENERATION)))
    return 0 if value is None else int(value)


def bump(session: Session) -> None:
    """Move the generation in `session`'s transaction (a Core write to a watched table)."""
    connection = session.connection()
    connection.execute(_BUMPS[connection.dialect.name])


def _table_of(instance: object) -> str | None:
    return getattr(type(instance), "__tablename__", None)


def _changed(instance: object) -> bool:
    table = _table_of(instance)
    if table not in WATCHED:
        return False
    columns = WATCHED[table]
    state: InstanceState[Any] = inspect(instance, raiseerr=True)
    if columns is None:
        return any(attr.history.has_changes() for attr in state.attrs)
    return any(state.attrs[name].history.has_changes() for name in columns)


@event.listens_for(Session, "after_flush")
def _bump_on_flush(session: Session, _context: UOWTransaction) -> None:
    changed = (
        any(_table_of(obj) in NEW_ROWS_MATTER for obj in session.new)
        or any(_table_of(obj) in WATCHED for obj in session.deleted)
        or any(_changed(obj) for obj in session.dirty)
    )
    if changed:
        bump(session)


# --- the guard ----------------------------------------------------------------------------

STALE = "stale_hint"
"""What the accept program's guard step is called (an empty guard: the program stopped)."""


def guard_step(name: str = "hinted") -> Step:
    """A first step for a money program: it returns a row (and the program goes on) only when
    the program's input `hint_generation` is NULL (nothing came from memory) or is still the
    committed generation. Otherwise the program STOPs: nothing is written, and the caller goes
    the uncached way (rule 3)."""

    def build(refs: Refs) -> Any:
        given = refs.param("hint_generation", BigInteger)
        current = func.coalesce(select(_table.c.value).where(_table.c.id == 1).scalar_subquery(), 0)
        fresh = given.is_(None) | (current == given)
        return select(fresh.label("fresh")).where(refs.gate, fresh)

    return Step(name, build, Empty.STOP)


# --- the memo -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Served:
    """What a read unit served from memory: the oldest generation it used, and the digest of
    the API key it took as proven (so that the uncached way can prove it again)."""

    generation: int
    key_digest: str | None = None


def note_served(conn: Any, served: Served) -> bool:
    """Note on the read unit `conn` that it served `served` from memory (keeping the oldest
    generation). False when `conn` cannot carry it (then serve nothing from memory)."""
    try:
        before: Served | None = conn.served
    except AttributeError:
        return False
    if before is not None:
        digest = served.key_digest or before.key_digest
        served = Served(min(before.generation, served.generation), digest)
    conn.served = served
    return True


def served_on(conn: Any) -> Served | None:
    """What the read unit `conn` served from memory (None: nothing)."""
    return getattr(conn, "served", None)


class Memo(Generic[V]):
    """Hints of one generation (rule 2): `get` answers (value, generation) or None."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # serve's loops may share a Runtime across threads
        self._generation = -1
        self._entries: dict[Hashable, V] = {}

    def get(self, key: Hashable) -> tuple[V, int] | None:
        found = self._entries.get(key)
        if found is None:
            return None
        return found, self._generation

    def put(self, key: Hashable, value: V, generation: int) -> None:
        """File `value`, read after `generation` was: dropped when the memo is already at a
        newer one; every entry goes when `generation` is newer than the memo's."""
        with self._lock:
            if generation < self._generation:
                return
            if generation > self._generation or len(self._entries) >= MAX_ENTRIES:
                self._entries = {}
                self._generation = generation
            self._entries[key] = value

    def forget(self) -> None:
        """Drop every entry (a guard found the generation moved)."""
        with self._lock:
            self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)


class Used:
    """Keys known to be used (an account's Idempotency-Keys this process saw accepted or
    replayed): a fact that never changes (a call is never deleted), so no generation. Only an
    optimisation: a call whose key is here looks it up instead of trying accept first."""

    def __init__(self) -> None:
        self._keys: set[Hashable] = set()

    def add(self, key: Hashable) -> None:
        if len(self._keys) >= MAX_ENTRIES:
            self._keys = set()
        self._keys.add(key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._keys


@dataclass
class Hints:
    """The hints of one process (carried by its Runtime): API keys and invocable facts, and
    the Idempotency-Keys it knows to be used."""

    keys: Memo[Any]
    facts: Memo[Any]
    used: Used

    @classmethod
    def empty(cls) -> Hints:
        return cls(keys=Memo(), facts=Memo(), used=Used())

    def forget(self) -> None:
        self.keys.forget()
        self.facts.forget()
