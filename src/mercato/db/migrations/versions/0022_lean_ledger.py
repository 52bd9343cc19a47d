"""A lean ledger (decision 0595): a reservation is one pending transfer; settled calls' credits
are appended and folded into earnings and revenue later.

Upgrade, on both stores, in one transaction, keeping every balance, receipt and `verify-ledger`
figure:

- `reservations.credit_seq` (the order a settled call's credits are folded in) and
  `ledger_accounts.folded_through` (the watermark of earnings and revenue); PostgreSQL: the
  sequence `ledger_credit_seq`, started after the numbers given here.
- Every SETTLED or REFUNDED reservation is numbered (by `resolved_at`, then id) and counted as
  folded: the earnings and revenue balances already hold those credits.
- The `reserve`, `settle` and `release` transfers and their entries are removed (the append-only
  guards are lifted for that one step): each one restated what its reservation row records (the
  amount, the caller, the split). So are the callers' `reserved` ledger accounts: reserved is now
  the sum of the HELD reservations, which equalled their balances (a `verify-ledger` invariant).
  Grants, refunds and payouts stay as they are.
- Indexes: the caller's reservations by (caller, state) in place of the caller index (the HELD
  sum and the history read it), and the credit numbers (unique, partial: the fold and the exact
  reads scan the credits above the fold's cursor by it).
- A trigger refuses every change of a reservation but HELD → SETTLED | RELEASED and
  SETTLED → REFUNDED (the resolution's own columns), so a second resolution is impossible
  whatever the code does.

Downgrade makes the removed transfers and entries again from the reservations (ids derived from
the reservation's: `trf_r…`/`trf_s…`/`trf_l…`, entries `ent_<leg>…`), the `reserved` accounts,
folds every credit, sets each cached balance to the sum of its entries, and drops what the
upgrade added. Balances, receipts and `verify-ledger` figures are the same; the remade rows'
ids are not the original ones.

Revision ID: 0022_lean_ledger
Revises: 0021_key_spend_limits
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_lean_ledger"
down_revision = "0021_key_spend_limits"
branch_labels = None
depends_on = None

_CALL_KINDS = "(kind = 'reserve' OR kind = 'settle' OR kind = 'release')"
_POSTED = "(state = 'SETTLED' OR state = 'REFUNDED')"

_PG_RESOLVES_ONCE = """
CREATE FUNCTION ledger_reservation_resolves_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'reservation % is % and resolves once: % refused', OLD.id, OLD.state,
        NEW.state USING ERRCODE = '23514';
END
$$
"""
# When a change of a reservation is refused (the trigger's WHEN, the same text on both stores):
# anything but HELD -> SETTLED | RELEASED or SETTLED -> REFUNDED, or a change of what the
# pending transfer was (or, once resolved, of how it resolved).
_REFUSED_CHANGE = (
    "NOT ((OLD.state = 'HELD' AND (NEW.state = 'SETTLED' OR NEW.state = 'RELEASED')) "
    "OR (OLD.state = 'SETTLED' AND NEW.state = 'REFUNDED')) "
    "OR NEW.id <> OLD.id OR NEW.account_id <> OLD.account_id "
    "OR NEW.reference <> OLD.reference OR NEW.amount <> OLD.amount "
    "OR (OLD.state <> 'HELD' AND ("
    "NEW.provider_account_id IS NOT OLD.provider_account_id "
    "OR NEW.provider_amount IS NOT OLD.provider_amount "
    "OR NEW.platform_amount IS NOT OLD.platform_amount "
    "OR NEW.credit_seq IS NOT OLD.credit_seq))"
)


def _pg() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _refused_change_sql() -> str:
    if _pg():
        return _REFUSED_CHANGE.replace("IS NOT", "IS DISTINCT FROM")
    return _REFUSED_CHANGE


def _without_append_only_guards(statements: list[str]) -> None:
    """Run `statements` with the append-only guards of transfers and entries lifted."""
    tables = ("ledger_transfers", "ledger_entries")
    if _pg():
        for table in tables:
            op.execute(f"ALTER TABLE {table} DISABLE TRIGGER trg_{table}_append_only")
        for statement in statements:
            op.execute(statement)
        for table in tables:
            op.execute(f"ALTER TABLE {table} ENABLE TRIGGER trg_{table}_append_only")
        return
    bind = op.get_bind()
    names = [f"trg_{table}_no_{action}" for table in tables for action in ("update", "delete")]
    saved = []
    for name in names:
        (sql,) = bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)
        ).one()
        saved.append(sql)
        op.execute(f"DROP TRIGGER {name}")
    for statement in statements:
        op.execute(statement)
    for sql in saved:
        bind.exec_driver_sql(sql)


def upgrade() -> None:
    op.add_column("reservations", sa.Column("credit_seq", sa.BigInteger(), nullable=True))
    op.add_column(
        "ledger_accounts",
        sa.Column("folded_through", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.execute(
        "UPDATE reservations SET credit_seq = numbered.n FROM ("  # noqa: S608 (constants)
        "SELECT id, row_number() OVER (ORDER BY resolved_at, id) AS n FROM reservations "
        f"WHERE {_POSTED}) AS numbered WHERE reservations.id = numbered.id"
    )
    op.execute(
        "UPDATE ledger_accounts SET folded_through = "
        "(SELECT COALESCE(MAX(credit_seq), 0) FROM reservations) "
        "WHERE kind = 'earnings' OR kind = 'revenue'"
    )
    if _pg():
        op.execute("CREATE SEQUENCE ledger_credit_seq AS BIGINT")
        op.execute(
            "SELECT setval('ledger_credit_seq', "
            "(SELECT COALESCE(MAX(credit_seq), 0) FROM reservations) + 1, false)"
        )
    _without_append_only_guards(
        [
            "DELETE FROM ledger_entries WHERE transfer_id IN "  # noqa: S608 (constants)
            f"(SELECT id FROM ledger_transfers WHERE {_CALL_KINDS})",
            f"DELETE FROM ledger_transfers WHERE {_CALL_KINDS}",  # noqa: S608 (constants)
        ]
    )
    op.execute("DELETE FROM ledger_accounts WHERE kind = 'reserved'")
    # One index by caller serves the HELD sum (reserved) and the caller's history: it replaces
    # the caller index of 0002.
    op.drop_index("ix_reservations_account_id", "reservations")
    op.create_index("ix_reservations_account_id_state", "reservations", ["account_id", "state"])
    op.create_index(
        "ux_reservations_credit_seq",
        "reservations",
        ["credit_seq"],
        unique=True,
        postgresql_where=sa.text("credit_seq IS NOT NULL"),
        sqlite_where=sa.text("credit_seq IS NOT NULL"),
    )
    if _pg():
        op.execute(_PG_RESOLVES_ONCE)
        op.execute(
            "CREATE TRIGGER trg_reservations_resolve_once BEFORE UPDATE ON reservations "
            f"FOR EACH ROW WHEN ({_refused_change_sql()}) "
            "EXECUTE FUNCTION ledger_reservation_resolves_once()"
        )
    else:
        op.execute(
            "CREATE TRIGGER trg_reservations_resolve_once BEFORE UPDATE ON reservations "
            f"WHEN {_refused_change_sql()} BEGIN SELECT RAISE(ABORT, "
            "'a reservation resolves once: change refused'); END"
        )


# --- downgrade: the transfers and entries made again ------------------------------------------

_SUFFIX = "substr(r.id, 5)"


def _remade_transfers() -> list[str]:
    def transfer(letter: str, kind: str, at: str, where: str) -> str:
        return (
            "INSERT INTO ledger_transfers (id, kind, reference, memo, created_at) "  # noqa: S608 (constants)
            f"SELECT 'trf_{letter}' || {_SUFFIX}, '{kind}', r.id, r.reference, {at} "
            f"FROM reservations AS r WHERE {where}"
        )

    def entry(leg: str, letter: str, account: str, amount: str, where: str) -> str:
        return (
            "INSERT INTO ledger_entries (id, transfer_id, ledger_account_id, amount) "  # noqa: S608 (constants)
            f"SELECT 'ent_{leg}' || {_SUFFIX}, 'trf_{letter}' || {_SUFFIX}, a.id, {amount} "
            f"FROM reservations AS r JOIN ledger_accounts AS a ON {account} WHERE {where}"
        )

    caller = "a.owner = r.account_id AND a.kind = '{}'"
    provider = "a.owner = r.provider_account_id AND a.kind = 'earnings'"
    platform = "a.owner = 'platform' AND a.kind = 'revenue'"
    posted = _POSTED.replace("state", "r.state")
    released = "r.state = 'RELEASED'"
    return [
        transfer("r", "reserve", "r.created_at", "1 = 1"),
        transfer("s", "settle", "r.resolved_at", posted),
        transfer("l", "release", "r.resolved_at", released),
        entry("ra", "r", caller.format("available"), "-r.amount", "1 = 1"),
        entry("rr", "r", caller.format("reserved"), "r.amount", "1 = 1"),
        entry("sr", "s", caller.format("reserved"), "-r.amount", posted),
        entry("se", "s", provider, "r.provider_amount", f"{posted} AND r.provider_amount <> 0"),
        entry("sp", "s", platform, "r.platform_amount", f"{posted} AND r.platform_amount <> 0"),
        entry("lr", "l", caller.format("reserved"), "-r.amount", released),
        entry("la", "l", caller.format("available"), "r.amount", released),
    ]


def downgrade() -> None:
    if _pg():
        op.execute("DROP TRIGGER trg_reservations_resolve_once ON reservations")
        op.execute("DROP FUNCTION ledger_reservation_resolves_once()")
    else:
        op.execute("DROP TRIGGER trg_reservations_resolve_once")
    # The accounts the remade entries need: callers' reserved, providers' earnings not folded
    # yet, platform revenue.
    op.execute(
        "INSERT INTO ledger_accounts (id, owner, kind, balance, folded_through) "
        "SELECT DISTINCT 'lac_r' || substr(account_id, 5), account_id, 'reserved', 0, 0 "
        "FROM reservations"
    )
    op.execute(
        "INSERT INTO ledger_accounts (id, owner, kind, balance, folded_through) "
        "SELECT DISTINCT 'lac_e' || substr(r.provider_account_id, 5), r.provider_account_id, "
        "'earnings', 0, 0 FROM reservations AS r WHERE r.credit_seq IS NOT NULL "
        "AND r.provider_amount <> 0 AND NOT EXISTS (SELECT 1 FROM ledger_accounts AS a "
        "WHERE a.owner = r.provider_account_id AND a.kind = 'earnings')"
    )
    op.execute(
        "INSERT INTO ledger_accounts (id, owner, kind, balance, folded_through) "
        "SELECT 'lac_platform_revenue', 'platform', 'revenue', 0, 0 "
        "WHERE EXISTS (SELECT 1 FROM reservations WHERE credit_seq IS NOT NULL "
        "AND platform_amount <> 0) AND NOT EXISTS (SELECT 1 FROM ledger_accounts "
        "WHERE owner = 'platform' AND kind = 'revenue')"
    )
    for statement in _remade_transfers():
        op.execute(statement)
    op.execute(
        "UPDATE ledger_accounts SET balance = (SELECT COALESCE(SUM(e.amount), 0) "
        "FROM ledger_entries AS e WHERE e.ledger_account_id = ledger_accounts.id)"
    )
    op.drop_index("ux_reservations_credit_seq", "reservations")
    op.drop_index("ix_reservations_account_id_state", "reservations")
    op.create_index("ix_reservations_account_id", "reservations", ["account_id"])
    if _pg():
        op.execute("DROP SEQUENCE ledger_credit_seq")
    op.drop_column("ledger_accounts", "folded_through")
    op.drop_column("reservations", "credit_seq")
