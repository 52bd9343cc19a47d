"""PostgreSQL: post a ledger transfer in one round trip (decision 0186).

`ledger_post_transfer` does on the server what `mercato.ledger.service._post` does in five
statements: find (or create) the legs' accounts, lock them in id order, refuse a guarded debit
that finds too little, append the transfer and its entries, move the balances. The append-only
triggers, the deferred balanced-transfer check and the balance CHECK still apply to what it
writes. SQLite has no server-side functions; there the service posts statement by statement.

Revision ID: 0008_ledger_post_function
Revises: 0007_cases
"""

from __future__ import annotations

from alembic import op

revision = "0008_ledger_post_function"
down_revision = "0007_cases"
branch_labels = None
depends_on = None

# Legs arrive as parallel arrays (owner, kind, signed amount, guarded, a fresh entry id, an id
# for the account should it not exist yet). Returns (short_leg, short_balance): both NULL when
# the transfer was posted; otherwise the 0-based index of the first guarded debit that found
# too little and that balance, and nothing was written.
_CREATE = """
CREATE FUNCTION ledger_post_transfer(
    p_transfer_id text, p_kind text, p_reference text, p_memo text, p_created_at timestamptz,
    p_owners text[], p_kinds text[], p_amounts bigint[], p_guarded boolean[],
    p_entry_ids text[], p_new_account_ids text[],
    OUT short_leg integer, OUT short_balance bigint
) LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(p_owners);
    ids text[];
    balances bigint[];
    missing integer;
    i integer;
BEGIN
    -- Create missing accounts in one global (owner, kind) order, so that two transfers
    -- creating the same accounts wait on each other instead of deadlocking.
    SELECT count(*) INTO missing
      FROM unnest(p_owners, p_kinds) AS leg(owner, kind)
     WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts a
                        WHERE a.owner = leg.owner AND a.kind = leg.kind);
    IF missing > 0 THEN
        INSERT INTO ledger_accounts (id, owner, kind, balance)
        SELECT leg.id, leg.owner, leg.kind, 0
          FROM unnest(p_new_account_ids, p_owners, p_kinds) AS leg(id, owner, kind)
         ORDER BY leg.owner, leg.kind
        ON CONFLICT (owner, kind) DO NOTHING;
    END IF;
    -- One lock order for every transfer (id), so two transfers never deadlock. NO KEY UPDATE:
    -- the entries other transfers append take KEY SHARE on these rows and do not wait.
    PERFORM 1 FROM ledger_accounts a
      JOIN unnest(p_owners, p_kinds) AS leg(owner, kind)
        ON a.owner = leg.owner AND a.kind = leg.kind
     ORDER BY a.id
       FOR NO KEY UPDATE OF a;
    SELECT array_agg(a.id ORDER BY leg.ord), array_agg(a.balance ORDER BY leg.ord)
      INTO ids, balances
      FROM unnest(p_owners, p_kinds) WITH ORDINALITY AS leg(owner, kind, ord)
      JOIN ledger_accounts a ON a.owner = leg.owner AND a.kind = leg.kind;
    IF COALESCE(cardinality(ids), 0) <> n THEN
        RAISE EXCEPTION 'ledger transfer % did not find all % accounts', p_transfer_id, n;
    END IF;
    FOR i IN 1 .. n LOOP
        IF p_guarded[i] AND balances[i] < -p_amounts[i] THEN
            short_leg := i - 1;
            short_balance := balances[i];
            RETURN;
        END IF;
    END LOOP;
    INSERT INTO ledger_transfers (id, kind, reference, memo, created_at)
    VALUES (p_transfer_id, p_kind, p_reference, p_memo, p_created_at);
    INSERT INTO ledger_entries (id, transfer_id, ledger_account_id, amount)
    SELECT e.id, p_transfer_id, e.account_id, e.amount
      FROM unnest(p_entry_ids, ids, p_amounts) AS e(id, account_id, amount);
    UPDATE ledger_accounts a
       SET balance = a.balance + m.amount
      FROM unnest(ids, p_amounts) AS m(id, amount)
     WHERE a.id = m.id;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION IF EXISTS ledger_post_transfer(text, text, text, text, timestamptz, "
            "text[], text[], bigint[], boolean[], text[], text[])"
        )
