"""PostgreSQL: accept and settle an invocation in one statement each (decision 0191).

Four functions, one per module that owns the rows, so each keeps the rules its Python service
keeps on SQLite:

- `ledger_reserve` holds points for a call (the reservation row and its `reserve` transfer);
- `ledger_settle` charges a held reservation (the provider's share rounded down, the rest to
  revenue);
- `quota_take_slot` takes one slot of the account's fixed window;
- `invocation_accept` appends the call intent, then reserves, then takes the quota slot;
  `invocation_settle` moves a leased invocation to SUCCEEDED and settles its reservation.

Each runs as one statement, which PostgreSQL makes atomic on its own: a refusal raises, and
the raise takes back everything the statement wrote. Refusals use their own SQLSTATEs so the
Python services can name them: MC001 a short balance (DETAIL: the balance), MC002 an
exhausted quota window, MC003 a reservation already resolved (DETAIL: its state), MC004 a
ledger invariant broken. Every transfer still goes through `ledger_post_transfer` (locks in id
order, guarded debits), and the append-only triggers, the deferred balanced-transfer check and
every CHECK still apply. SQLite has no server-side functions; there the services run statement
by statement in one transaction.

Revision ID: 0009_invocation_functions
Revises: 0008_ledger_post_function
"""

from __future__ import annotations

from alembic import op

revision = "0009_invocation_functions"
down_revision = "0008_ledger_post_function"
branch_labels = None
depends_on = None

_LEDGER_RESERVE = """
CREATE FUNCTION ledger_reserve(
    p_reservation_id text, p_account_id text, p_amount bigint, p_reference text,
    p_created_at timestamptz, p_transfer_id text, p_entry_ids text[], p_new_account_ids text[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    short integer;
    balance bigint;
BEGIN
    INSERT INTO reservations (id, account_id, reference, amount, state, created_at)
    VALUES (p_reservation_id, p_account_id, p_reference, p_amount, 'HELD', p_created_at);
    SELECT t.short_leg, t.short_balance INTO short, balance
      FROM ledger_post_transfer(
           p_transfer_id, 'reserve', p_reservation_id, p_reference, p_created_at,
           ARRAY[p_account_id, p_account_id], ARRAY['available', 'reserved'],
           ARRAY[-p_amount, p_amount], ARRAY[true, false], p_entry_ids[1:2],
           p_new_account_ids[1:2]) AS t;
    IF short IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MC001', MESSAGE = 'insufficient points',
              DETAIL = balance::text;
    END IF;
END
$$
"""

_LEDGER_SETTLE = """
CREATE FUNCTION ledger_settle(
    p_reservation_id text, p_provider_account_id text, p_share_bps integer, p_now timestamptz,
    p_transfer_id text, p_entry_ids text[], p_new_account_ids text[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held reservations%ROWTYPE;
    current text;
    owners text[];
    kinds text[];
    amounts bigint[];
    entry_ids text[];
    account_ids text[];
    short integer;
BEGIN
    -- Only a HELD reservation moves, once; amounts are >= 0, so / rounds down.
    UPDATE reservations r
       SET state = 'SETTLED', provider_account_id = p_provider_account_id,
           provider_amount = r.amount * p_share_bps / 10000,
           platform_amount = r.amount - r.amount * p_share_bps / 10000,
           resolved_at = p_now
     WHERE r.id = p_reservation_id AND r.state = 'HELD'
    RETURNING r.* INTO held;
    IF NOT FOUND THEN
        SELECT r.state INTO current FROM reservations r WHERE r.id = p_reservation_id;
        RAISE EXCEPTION USING ERRCODE = 'MC003', MESSAGE = 'reservation already resolved',
              DETAIL = COALESCE(current, 'missing');
    END IF;
    -- The caller's reserved points to the provider's earnings and the platform's revenue;
    -- a leg that moves nothing (a 0 % or 100 % share) is left out, as the service does.
    SELECT array_agg(l.owner ORDER BY l.n), array_agg(l.kind ORDER BY l.n),
           array_agg(l.amount ORDER BY l.n), array_agg(l.entry_id ORDER BY l.n),
           array_agg(l.account_id ORDER BY l.n)
      INTO owners, kinds, amounts, entry_ids, account_ids
      FROM unnest(ARRAY[held.account_id, p_provider_account_id, 'platform'],
                  ARRAY['reserved', 'earnings', 'revenue'],
                  ARRAY[-held.amount, held.provider_amount, held.platform_amount],
                  p_entry_ids, p_new_account_ids)
           WITH ORDINALITY AS l(owner, kind, amount, entry_id, account_id, n)
     WHERE l.amount <> 0;
    SELECT t.short_leg INTO short
      FROM ledger_post_transfer(
           p_transfer_id, 'settle', p_reservation_id, held.reference, p_now, owners, kinds,
           amounts, ARRAY[true, false, false], entry_ids, account_ids) AS t;
    IF short IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MC004',
              MESSAGE = 'a reserved balance is short of its reservation';
    END IF;
END
$$
"""

_QUOTA_TAKE_SLOT = """
CREATE FUNCTION quota_take_slot(
    p_account_id text, p_policy text, p_window_start bigint, p_limit integer
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    taken integer;
BEGIN
    FOR attempt IN 1 .. 2 LOOP
        -- A new window starts at 1; the current one counts up to the limit.
        UPDATE quota_windows w
           SET accepted = CASE WHEN w.window_start = p_window_start THEN w.accepted + 1
                               ELSE 1 END,
               window_start = p_window_start
         WHERE w.account_id = p_account_id AND w.policy = p_policy
           AND (w.window_start <> p_window_start OR w.accepted < p_limit)
        RETURNING w.accepted INTO taken;
        IF FOUND THEN
            RETURN taken;
        END IF;
        IF attempt = 1 THEN
            -- The account's first call under this policy; a concurrent first call may win the
            -- insert, and then the conditional update decides.
            INSERT INTO quota_windows (account_id, policy, window_start, accepted)
            VALUES (p_account_id, p_policy, p_window_start, 1)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN 1;
            END IF;
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = 'MC002', MESSAGE = 'quota window exhausted';
END
$$
"""

_INVOCATION_ACCEPT = """
CREATE FUNCTION invocation_accept(
    p_id text, p_account_id text, p_idempotency_key text, p_fingerprint text, p_channel text,
    p_service_code text, p_version text, p_version_id text, p_contract_digest text,
    p_connection_id text, p_provider_account_id text, p_provider_share_bps integer,
    p_price integer, p_has_artifact_contract boolean, p_response_max_bytes integer,
    p_result_schema json, p_payload bytea, p_provider_key text, p_state text,
    p_settlement text, p_reservation_id text, p_lease_owner text,
    p_lease_expires_at timestamptz, p_now timestamptz,
    p_transfer_id text, p_entry_ids text[], p_new_account_ids text[],
    p_policy text, p_window_start bigint, p_limit integer
) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    -- The intent first: a same-key twin stops at its unique key before touching anything
    -- shared; the account's balances and its quota window are locked last.
    INSERT INTO invocations (
        id, account_id, idempotency_key, fingerprint, channel, service_code, version,
        version_id, contract_digest, connection_id, provider_account_id, provider_share_bps,
        price, has_artifact_contract, response_max_bytes, result_schema, payload,
        provider_key, state, settlement, reservation_id, sends, reconciliations,
        next_attempt_at, lease_owner, lease_expires_at, created_at, updated_at)
    VALUES (
        p_id, p_account_id, p_idempotency_key, p_fingerprint, p_channel, p_service_code,
        p_version, p_version_id, p_contract_digest, p_connection_id, p_provider_account_id,
        p_provider_share_bps, p_price, p_has_artifact_contract, p_response_max_bytes,
        p_result_schema, p_payload, p_provider_key, p_state, p_settlement, p_reservation_id,
        1, 0, p_now, p_lease_owner, p_lease_expires_at, p_now, p_now);
    PERFORM ledger_reserve(p_reservation_id, p_account_id, p_price, p_id, p_now,
                           p_transfer_id, p_entry_ids, p_new_account_ids);
    RETURN quota_take_slot(p_account_id, p_policy, p_window_start, p_limit);
END
$$
"""

_INVOCATION_SETTLE = """
CREATE FUNCTION invocation_settle(
    p_id text, p_lease_owner text, p_active text[], p_result bytea, p_artifacts json,
    p_now timestamptz, p_transfer_id text, p_entry_ids text[], p_new_account_ids text[]
) RETURNS SETOF invocations LANGUAGE plpgsql AS $$
DECLARE
    done invocations%ROWTYPE;
BEGIN
    UPDATE invocations i
       SET state = 'SUCCEEDED', settlement = 'SETTLED', result = p_result,
           artifacts = p_artifacts, settled_at = p_now, updated_at = p_now,
           lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL
     WHERE i.id = p_id AND i.lease_owner = p_lease_owner AND i.state = ANY (p_active)
    RETURNING i.* INTO done;
    IF NOT FOUND THEN
        RETURN;  -- the lease was lost: whoever holds it now decides
    END IF;
    PERFORM ledger_settle(done.reservation_id, done.provider_account_id,
                          done.provider_share_bps, p_now, p_transfer_id, p_entry_ids,
                          p_new_account_ids);
    RETURN NEXT done;
END
$$
"""

_SIGNATURES = (
    "invocation_settle(text, text, text[], bytea, json, timestamptz, text, text[], text[])",
    "invocation_accept(text, text, text, text, text, text, text, text, text, text, text, "
    "integer, integer, boolean, integer, json, bytea, text, text, text, text, text, "
    "timestamptz, timestamptz, text, text[], text[], text, bigint, integer)",
    "quota_take_slot(text, text, bigint, integer)",
    "ledger_settle(text, text, integer, timestamptz, text, text[], text[])",
    "ledger_reserve(text, text, bigint, text, timestamptz, text, text[], text[])",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for sql in (
            _LEDGER_RESERVE,
            _LEDGER_SETTLE,
            _QUOTA_TAKE_SLOT,
            _INVOCATION_ACCEPT,
            _INVOCATION_SETTLE,
        ):
            op.execute(sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in _SIGNATURES:
            op.execute(f"DROP FUNCTION IF EXISTS {signature}")
