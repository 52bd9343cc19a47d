"""Hints: what the hot invoke keeps in memory per serve process, the rule that keeps it
honest, and its one fallback (decisions 0400, 0570). The only module that knows the memory:
the invoke flow asks it; no web module imports it.

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
   after that generation was (`Recall.generation` first, then the facts, in the same read):
   an entry is never older than the generation it is filed under. Seeing a newer generation
   drops every entry.
3. **The money write decides; anything else falls back.** An attempt of a call notes what it
   took from memory (`Recall`). Its accept program's first step (`guard_step`) runs only
   while `hint_generation` still holds the generation of what it took; otherwise the program
   stops and writes nothing. That stop, a replay whose remembered key its read did not prove,
   and any refusal of an attempt that took something unproven from memory are one thing: a
   divergence, `Diverged`. The flow catches it once, at its top, forgets what the attempt took
   and runs the call again uncached (`Recall(..., recalling=False)`), which answers exactly as
   a process without memory would (a revoked key: 401; a held listing: 403; …). So a change
   committed before an invoke's accept governs that invoke, in every process sharing the
   database, without any clock or TTL: PostgreSQL's statement (READ COMMITTED, a fresh
   snapshot per statement) and SQLite's BEGIN IMMEDIATE transaction both read the committed
   generation at the moment they write.

Admin writes serialise on the generation row (they are rare); the hot path only reads it.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import BigInteger, Integer, Table, event, func, inspect, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstanceState, Mapped, Session, UOWTransaction, mapped_column

from mercato.core.errors import MercatoError
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

    def drop(self, key: Hashable) -> None:
        """Drop the entry of `key` (a call found it did not hold)."""
        with self._lock:
            self._entries.pop(key, None)

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


class KeyHint:
    """An API key as a process keeps it: its principal, and when its use was last recorded as
    this process knows it (a process records a use at most once per resolution period)."""

    __slots__ = ("last_used_at", "principal")

    def __init__(self, principal: Any, last_used_at: dt.datetime | None) -> None:
        self.principal = principal
        self.last_used_at = last_used_at


@dataclass
class Hints:
    """The hints of one process (carried by its Runtime): API keys (by digest) and invocable
    facts, and the Idempotency-Keys it knows to be used."""

    keys: Memo[KeyHint]
    facts: Memo[Any]
    used: Used

    @classmethod
    def empty(cls) -> Hints:
        return cls(keys=Memo(), facts=Memo(), used=Used())


# --- the fallback -------------------------------------------------------------------------


class Diverged(Exception):
    """What an attempt of a call took from memory did not hold (its accept program stopped),
    or the attempt's answer would rest on it unproven (rule 3): the flow forgets it and runs
    the call again uncached."""


class Recall:
    """One attempt of a call and the process's memory (rule 3): what it takes from memory,
    what it files after reading, and whether its answer rests on something unproven.

    `recalling=False`: the uncached attempt, which reads everything (and files it)."""

    __slots__ = ("_facts", "_hints", "_key", "_read", "generation", "recalling", "unproven")

    def __init__(self, hints: Hints | None, *, recalling: bool = True) -> None:
        self._hints = hints
        self.recalling = recalling and hints is not None
        self.generation: int | None = None
        """The oldest generation of what was taken: the accept program's guard proves it."""
        self.unproven = False
        """Something was taken that no read has proven since (a refusal then diverges)."""
        self._read: int | None = None  # the generation read in this attempt, to file under
        self._key: str | None = None
        self._facts: Hashable | None = None

    def key(self, digest: str) -> KeyHint | None:
        """The API key of `digest` from memory, or None (then read it and `file_key`)."""
        hints = self._hints
        if not self.recalling or hints is None:
            return None
        hit = hints.keys.get(digest)
        if hit is None:
            return None
        self._key = digest
        return self._took(hit)

    def facts(self, key: Hashable, used: Hashable) -> Any | None:
        """The facts filed under `key` from memory, or None; None too when the call's
        Idempotency-Key `used` is known to be used (a replay: read it first)."""
        hints = self._hints
        if not self.recalling or hints is None or used in hints.used:
            return None
        hit = hints.facts.get(key)
        if hit is None:
            return None
        self._facts = key
        return self._took(hit)

    def _took(self, hit: tuple[V, int]) -> V:
        taken, generation = self.generation, hit[1]
        self.generation = generation if taken is None or generation < taken else taken
        self.unproven = True
        return hit[0]

    def proving(self) -> str | None:
        """The digest of the API key taken from memory and not proven yet (None: none), for
        a read to prove beside what it reads (`accounts.key_proof`)."""
        return self._key if self.unproven else None

    def proven(self) -> None:
        """A read (or the accept program) proved what was taken: a refusal from now on is the
        call's own."""
        self.unproven = False

    def wants_generation(self) -> bool:
        """Whether to read the generation now (`saw` it), before what will be filed."""
        return self._hints is not None and self._read is None

    def saw(self, generation: int) -> None:
        self._read = generation

    def file_key(self, digest: str, hint: KeyHint) -> None:
        if self._hints is not None and self._read is not None:
            self._hints.keys.put(digest, hint, self._read)

    def file_facts(self, key: Hashable, facts: Any) -> None:
        if self._hints is not None and self._read is not None:
            self._hints.facts.put(key, facts, self._read)

    def used(self, key: Hashable) -> None:
        """Note that the Idempotency-Key `key` is used (accepted, replayed or refused as one)."""
        if self._hints is not None:
            self._hints.used.add(key)

    def diverged(self, error: BaseException) -> bool:
        """Whether `error`, out of this attempt, is a divergence: `Diverged` itself, or a
        refusal while something taken from memory is unproven (the uncached attempt gives
        the answer, and proves the key first)."""
        return isinstance(error, Diverged) or (
            self.unproven and isinstance(error, (MercatoError, IntegrityError))
        )

    def forget(self) -> None:
        """Drop what this attempt took from memory (it diverged)."""
        hints = self._hints
        if hints is None:
            return
        if self._key is not None:
            hints.keys.drop(self._key)
        if self._facts is not None:
            hints.facts.drop(self._facts)
