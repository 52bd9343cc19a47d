"""The worker's queue in its own table, so that a call's terminal update is a HOT update
(issue 43, decision 0602).

On PostgreSQL an UPDATE that changes no indexed column, and finds room on the row's page, is a
heap-only tuple update: no index is written and the WAL record holds only the changed bytes.
A settle changed `state` (and `next_attempt_at`), both in the worker's index, so each one wrote
a new entry into every index of `invocations` and a whole new row version. Now:

- `invocation_dues` holds the id of every call that is not terminal (DISPATCHING, RETRY_WAIT,
  RECONCILING): triggers on `invocations` add it when a call is accepted and remove it when the
  call's state becomes SUCCEEDED or FAILED, on both stores, whatever code writes the row. The
  worker's claims and the stuck list read the calls through it (a few rows: the calls in flight
  and the stuck ones) instead of the index `(state, stuck_at, next_attempt_at)`, dropped here.
- The index `(api_key_id, created_at)` is dropped: setting a key's limit counts the key's calls
  through its account's index `(account_id, id)` instead, once per change of a limit.
- PostgreSQL: `invocations` keeps half of each page free (fillfactor 50) for the terminal update
  to land on the row's own page. Pages written before this keep their fill until rewritten.

Downgrade drops the triggers and the table and makes the two indexes again.

Revision ID: 0023_invocation_dues
Revises: 0022_lean_ledger
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_invocation_dues"
down_revision = "0022_lean_ledger"
branch_labels = None
depends_on = None

FILLFACTOR = 50

_ACTIVE_NEW = "(NEW.state = 'DISPATCHING' OR NEW.state = 'RETRY_WAIT' OR NEW.state = 'RECONCILING')"
_ENDED = (
    "(NEW.state = 'SUCCEEDED' OR NEW.state = 'FAILED') "
    "AND NOT (OLD.state = 'SUCCEEDED' OR OLD.state = 'FAILED')"
)

_PG_DUE = """
CREATE FUNCTION invocation_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO invocation_dues (invocation_id) VALUES (NEW.id);
    ELSE
        DELETE FROM invocation_dues WHERE invocation_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$
"""


def _pg() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.create_table(
        "invocation_dues",
        sa.Column("invocation_id", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("invocation_id", name=op.f("pk_invocation_dues")),
    )
    op.execute(
        "INSERT INTO invocation_dues (invocation_id) SELECT id FROM invocations "
        "WHERE state = 'DISPATCHING' OR state = 'RETRY_WAIT' OR state = 'RECONCILING'"
    )
    if _pg():
        op.execute(_PG_DUE)
        op.execute(
            "CREATE TRIGGER trg_invocations_due AFTER INSERT ON invocations FOR EACH ROW "
            f"WHEN {_ACTIVE_NEW} EXECUTE FUNCTION invocation_due()"
        )
        op.execute(
            "CREATE TRIGGER trg_invocations_ended AFTER UPDATE OF state ON invocations "
            f"FOR EACH ROW WHEN ({_ENDED}) EXECUTE FUNCTION invocation_due()"
        )
        op.execute(f"ALTER TABLE invocations SET (fillfactor = {FILLFACTOR})")
    else:
        op.execute(
            "CREATE TRIGGER trg_invocations_due AFTER INSERT ON invocations "  # noqa: S608 (constants)
            f"WHEN {_ACTIVE_NEW} BEGIN "
            "INSERT INTO invocation_dues (invocation_id) VALUES (NEW.id); END"
        )
        op.execute(
            "CREATE TRIGGER trg_invocations_ended AFTER UPDATE OF state ON invocations "  # noqa: S608 (constants)
            f"WHEN {_ENDED} BEGIN "
            "DELETE FROM invocation_dues WHERE invocation_id = NEW.id; END"
        )
    op.drop_index("ix_invocations_state_stuck_at_next_attempt_at", table_name="invocations")
    op.drop_index("ix_invocations_api_key_id_created_at", table_name="invocations")


def downgrade() -> None:
    op.create_index(
        "ix_invocations_api_key_id_created_at", "invocations", ["api_key_id", "created_at"]
    )
    op.create_index(
        "ix_invocations_state_stuck_at_next_attempt_at",
        "invocations",
        ["state", "stuck_at", "next_attempt_at"],
    )
    if _pg():
        op.execute("ALTER TABLE invocations RESET (fillfactor)")
        op.execute("DROP TRIGGER trg_invocations_ended ON invocations")
        op.execute("DROP TRIGGER trg_invocations_due ON invocations")
        op.execute("DROP FUNCTION invocation_due()")
    else:
        op.execute("DROP TRIGGER trg_invocations_ended")
        op.execute("DROP TRIGGER trg_invocations_due")
    op.drop_table("invocation_dues")
