"""The ledger as it was before migration 0022 (revision `0021_key_spend_limits`, decision 0595):
how it wrote its movements and how its own `verify-ledger` read them.

Every reserve, settle and release was a transfer with its entries, like grants, refunds and
payouts; every balance, callers' `reserved` too, was cached in its `ledger_accounts` row. A
call's transfers carry the reservation's id as their reference and its reference (the
invocation's id) as their memo, and are dated when the reservation was made (`reserve`),
resolved (`settle`, `release`) or refunded (`refund`). A leg of 0 points wrote no entry.

`MOVEMENTS` is that knowledge once: `OldLedger` posts one movement at a time with it (the
migration test), `call_movements_sql` writes every call's movements in bulk from the
reservations (`bench.ledger_migration`). `cached_balances`, `lines` and `verify` read a store at
that revision (the current code's reads and checks are the lean ledger's).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Select, Table, select, text

from mercato.ledger.models import LedgerAccount, LedgerEntry, LedgerTransfer
from mercato.ledger.schemas import PLATFORM, AccountKind, LedgerReport

_LIMIT = 50
"""The old `verify-ledger` reported at most this many problems of one kind."""


@dataclass(frozen=True)
class Leg:
    """One leg of a call's movement: `sign` × the reservation's `column` to (party, kind)."""

    code: str  # the entry id's tag in bulk writes (the tags 0022's downgrade remakes them with)
    party: str  # "caller", "provider" or "platform"
    account_kind: str
    column: str  # "amount", "provider_amount" or "platform_amount"
    sign: int


@dataclass(frozen=True)
class Movement:
    letter: str  # the transfer id's tag in bulk writes
    dated: str  # the reservation's column the transfer is dated by
    states: tuple[str, ...]  # the reservations (by state) that had this movement
    legs: tuple[Leg, ...]


MOVEMENTS: dict[str, Movement] = {
    "reserve": Movement(
        "r",
        "created_at",
        ("HELD", "SETTLED", "RELEASED", "REFUNDED"),
        (
            Leg("ra", "caller", "available", "amount", -1),
            Leg("rr", "caller", "reserved", "amount", 1),
        ),
    ),
    "settle": Movement(
        "s",
        "resolved_at",
        ("SETTLED", "REFUNDED"),
        (
            Leg("sr", "caller", "reserved", "amount", -1),
            Leg("se", "provider", "earnings", "provider_amount", 1),
            Leg("sp", "platform", "revenue", "platform_amount", 1),
        ),
    ),
    "release": Movement(
        "l",
        "resolved_at",
        ("RELEASED",),
        (
            Leg("lr", "caller", "reserved", "amount", -1),
            Leg("la", "caller", "available", "amount", 1),
        ),
    ),
    "refund": Movement(
        "f",
        "refunded_at",
        ("REFUNDED",),
        (
            Leg("fe", "provider", "earnings", "provider_amount", -1),
            Leg("fp", "platform", "revenue", "platform_amount", -1),
            Leg("fa", "caller", "available", "amount", 1),
        ),
    ),
}


class OldLedger:
    """Posts movements one at a time as the ledger before 0022 wrote them (ids `trf_0001`,
    `ent_0001_<leg>`; transfer n dated `t0` + n seconds)."""

    def __init__(self, conn: Connection, *, provider: str, t0: dt.datetime) -> None:
        self.conn = conn
        self.provider = provider
        self.t0 = t0
        self.n = 0

    def _account(self, owner: str, kind: str) -> str:
        found = self.conn.execute(
            text("SELECT id FROM ledger_accounts WHERE owner = :o AND kind = :k"),
            {"o": owner, "k": kind},
        ).scalar()
        if found is None:
            found = f"lac_{owner}_{kind}"
            self.conn.execute(
                text("INSERT INTO ledger_accounts VALUES (:i, :o, :k, 0)"),
                {"i": found, "o": owner, "k": kind},
            )
        return str(found)

    def post(
        self, kind: str, reference: str | None, memo: str, *legs: tuple[str, str, int]
    ) -> None:
        self.n += 1
        transfer = f"trf_{self.n:04d}"
        self.conn.execute(
            text("INSERT INTO ledger_transfers VALUES (:i, :k, :r, :m, :t)"),
            {"i": transfer, "k": kind, "r": reference, "m": memo, "t": self.at()},
        )
        for leg, (owner, account_kind, amount) in enumerate(legs):
            if amount == 0:
                continue
            account = self._account(owner, account_kind)
            self.conn.execute(
                text("UPDATE ledger_accounts SET balance = balance + :a WHERE id = :i"),
                {"a": amount, "i": account},
            )
            self.conn.execute(
                text("INSERT INTO ledger_entries VALUES (:i, :t, :a, :n)"),
                {"i": f"ent_{self.n:04d}_{leg}", "t": transfer, "a": account, "n": amount},
            )

    def at(self) -> dt.datetime:
        return self.t0 + dt.timedelta(seconds=self.n)

    def _move(self, kind: str, rid: str, caller: str, amount: int, provider: int = 0) -> None:
        parties = {"caller": caller, "provider": self.provider, "platform": PLATFORM}
        columns = {"amount": amount, "provider_amount": provider}
        columns["platform_amount"] = amount - provider
        legs = [
            (parties[leg.party], leg.account_kind, leg.sign * columns[leg.column])
            for leg in MOVEMENTS[kind].legs
        ]
        self.post(kind, rid, f"inv_{rid}", *legs)

    def reserve(self, rid: str, caller: str, amount: int) -> None:
        self._move("reserve", rid, caller, amount)
        self.conn.execute(
            text(
                "INSERT INTO reservations (id, account_id, reference, amount, state, created_at) "
                "VALUES (:i, :c, :r, :a, 'HELD', :t)"
            ),
            {"i": rid, "c": caller, "r": f"inv_{rid}", "a": amount, "t": self.at()},
        )

    def settle(self, rid: str, caller: str, amount: int, bps: int) -> None:
        provider = amount * bps // 10_000
        self._move("settle", rid, caller, amount, provider)
        self.conn.execute(
            text(
                "UPDATE reservations SET state = 'SETTLED', provider_account_id = :p, "
                "provider_amount = :pa, platform_amount = :qa, resolved_at = :t WHERE id = :i"
            ),
            {"p": self.provider, "pa": provider, "qa": amount - provider, "t": self.at(), "i": rid},
        )

    def release(self, rid: str, caller: str, amount: int) -> None:
        self._move("release", rid, caller, amount)
        self.conn.execute(
            text("UPDATE reservations SET state = 'RELEASED', resolved_at = :t WHERE id = :i"),
            {"t": self.at(), "i": rid},
        )

    def refund(self, rid: str, caller: str, amount: int, provider: int) -> None:
        self._move("refund", rid, caller, amount, provider)
        self.conn.execute(
            text("UPDATE reservations SET state = 'REFUNDED', refunded_at = :t WHERE id = :i"),
            {"t": self.at(), "i": rid},
        )


# --- in bulk ------------------------------------------------------------------------------

_OWNER = {"caller": "r.account_id", "provider": "r.provider_account_id", "platform": "'platform'"}


def call_movements_sql(kind: str) -> list[str]:
    """INSERT … SELECT statements writing the `kind` transfer of every reservation that had
    one, then its entries (ids `trf_<letter><n>`, `ent_<leg><n>` for reservation `res_<n>`):
    the ledger accounts must exist."""
    movement = MOVEMENTS[kind]
    states = " OR ".join(f"r.state = '{state}'" for state in movement.states)
    suffix = "substr(r.id, 5)"
    statements = [
        "INSERT INTO ledger_transfers (id, kind, reference, memo, created_at) "  # noqa: S608 (constants)
        f"SELECT 'trf_{movement.letter}' || {suffix}, '{kind}', r.id, r.reference, "
        f"r.{movement.dated} FROM reservations AS r WHERE {states}"
    ]
    for leg in movement.legs:
        sign = "-" if leg.sign < 0 else ""
        statements.append(
            "INSERT INTO ledger_entries (id, transfer_id, ledger_account_id, amount) "  # noqa: S608 (constants)
            f"SELECT 'ent_{leg.code}' || {suffix}, 'trf_{movement.letter}' || {suffix}, a.id, "
            f"{sign}r.{leg.column} FROM reservations AS r JOIN ledger_accounts AS a "
            f"ON a.owner = {_OWNER[leg.party]} AND a.kind = '{leg.account_kind}' "
            f"WHERE ({states}) AND r.{leg.column} <> 0"
        )
    return statements


CACHE_BALANCES = (
    "UPDATE ledger_accounts SET balance = (SELECT COALESCE(SUM(e.amount), 0) "
    "FROM ledger_entries AS e WHERE e.ledger_account_id = ledger_accounts.id)"
)
"""Each account's cached balance: what its entries, posted one by one, would have left."""


# --- reads at revision 0021 ---------------------------------------------------------------


def cached_balances(conn: Connection) -> dict[tuple[str, str], int]:
    """Every non-zero cached balance by (owner, kind)."""
    rows = conn.execute(text("SELECT owner, kind, balance FROM ledger_accounts")).all()
    return {(owner, kind): int(balance) for owner, kind, balance in rows if balance}


_E = cast(Table, LedgerEntry.__table__).c
_T = cast(Table, LedgerTransfer.__table__).c
_A = cast(Table, LedgerAccount.__table__).c


def lines() -> Select[Any]:
    """Every entry as a line: (transfer kind, reference, memo, owner, account kind, amount,
    date), the columns `mercato.ledger.lines` gives (typed: dates read as on the new schema)."""
    return (
        select(_T.kind, _T.reference, _T.memo, _A.owner, _A.kind, _E.amount, _T.created_at)
        .select_from(cast(Table, LedgerEntry.__table__))
        .join(cast(Table, LedgerTransfer.__table__), _T.id == _E.transfer_id)
        .join(cast(Table, LedgerAccount.__table__), _A.id == _E.ledger_account_id)
    )


def _add(report: LedgerReport, problems: list[str]) -> None:
    report.problems.extend(problems[:_LIMIT])
    if len(problems) > _LIMIT:
        report.problems.append(f"... and {len(problems) - _LIMIT} more like the above")


def verify(conn: Connection) -> LedgerReport:
    """`verify-ledger` as revision 0021's code ran it: every transfer balanced (two entries or
    more), each cached balance the sum of its entries, signs, totals (circulating = issued),
    each caller's `reserved` equal to its HELD reservations, settled splits adding up."""
    report = LedgerReport()
    unbalanced = conn.execute(
        text(
            "SELECT t.id, COUNT(e.id), COALESCE(SUM(e.amount), 0) FROM ledger_transfers AS t "
            "LEFT JOIN ledger_entries AS e ON e.transfer_id = t.id GROUP BY t.id "
            "HAVING COUNT(e.id) < 2 OR COALESCE(SUM(e.amount), 0) <> 0 ORDER BY t.id"
        )
    ).all()
    _add(report, [f"transfer {t} has {n} entries summing to {s}" for t, n, s in unbalanced])
    uncached = conn.execute(
        text(
            "SELECT a.id, a.owner, a.kind, a.balance, COALESCE(SUM(e.amount), 0) "
            "FROM ledger_accounts AS a LEFT JOIN ledger_entries AS e "
            "ON e.ledger_account_id = a.id GROUP BY a.id, a.owner, a.kind, a.balance "
            "HAVING a.balance <> COALESCE(SUM(e.amount), 0) ORDER BY a.id"
        )
    ).all()
    _add(
        report,
        [
            f"ledger account {lid} ({owner} {kind}) caches {cached} but its entries sum to {total}"
            for lid, owner, kind, cached, total in uncached
        ],
    )
    totals: dict[str, int] = defaultdict(int)
    wrong_sign = []
    reserved: dict[str, int] = {}
    for lid, owner, kind, balance in conn.execute(
        text("SELECT id, owner, kind, balance FROM ledger_accounts")
    ).tuples():
        totals[kind] += balance
        if (kind == AccountKind.ISSUANCE and balance > 0) or (
            kind != AccountKind.ISSUANCE and balance < 0
        ):
            wrong_sign.append(f"ledger account {lid} ({owner} {kind}) has balance {balance}")
        if kind == AccountKind.RESERVED:
            reserved[owner] = int(balance)
    _add(report, wrong_sign)
    report.take_totals(totals)
    held = {
        str(owner): int(total)
        for owner, total in conn.execute(
            text(
                "SELECT account_id, SUM(amount) FROM reservations WHERE state = 'HELD' "
                "GROUP BY account_id"
            )
        ).tuples()
    }
    _add(
        report,
        [
            f"account {owner} has {reserved.get(owner, 0)} reserved but holds "
            f"{held.get(owner, 0)} in open reservations"
            for owner in sorted(set(held) | set(reserved))
            if reserved.get(owner, 0) != held.get(owner, 0)
        ],
    )
    splits = conn.execute(
        text(
            "SELECT id, state, amount, provider_amount, platform_amount FROM reservations "
            "WHERE (state = 'SETTLED' OR state = 'REFUNDED') AND (provider_amount IS NULL "
            "OR platform_amount IS NULL OR provider_amount + platform_amount <> amount)"
        )
    ).all()
    _add(
        report,
        [
            f"reservation {rid} ({state}) of {amount} splits into {prov} + {plat}"
            for rid, state, amount, prov, plat in splits
        ],
    )
    return report
