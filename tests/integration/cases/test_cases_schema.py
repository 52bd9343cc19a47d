"""The cases model and migration 0007 agree, and the database holds the case invariants."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import delete, insert, update
from sqlalchemy.exc import DBAPIError

from builders.cases import CaseWorld
from mercato.cases.models import Case
from mercato.db.base import Base
from mercato.db.runtime import Runtime


def test_models_match_the_migration(runtime: Runtime) -> None:
    with runtime.db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = [d for d in compare_metadata(context, Base.metadata) if "'cases'" in repr(d)]
    assert diffs == []


def _row(cw: CaseWorld, invocation_id: str, key: str, state: str = "OPEN") -> dict[str, object]:
    now = cw.world.clock.now()
    decided = (
        {} if state == "OPEN" else {"decided_by": "s", "decided_at": now, "decision_reason": "r"}
    )
    return {
        "id": f"case_{key}",
        "kind": "DISPUTE",
        "state": state,
        "account_id": cw.person_id,
        "idempotency_key": key,
        "fingerprint": "0" * 64,
        "statement": "why",
        "invocation_id": invocation_id,
        "refund_attempts": 0,
        "created_at": now,
        "updated_at": now,
        **decided,
    }


def test_the_database_refuses_a_second_open_dispute_and_any_delete(cw: CaseWorld) -> None:
    call = cw.session_call()
    db = cw.world.runtime.db
    with db.transaction() as session:
        session.execute(insert(Case).values(**_row(cw, call, "a")))
        session.execute(insert(Case).values(**_row(cw, call, "old", state="DENIED")))
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(insert(Case).values(**_row(cw, call, "b")))
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(insert(Case).values(**_row(cw, call, "c", state="APPROVED")))
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(delete(Case).where(Case.id == "case_a"))
    # REFUNDED needs its refund time; a decision needs its evidence.
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(update(Case).where(Case.id == "case_a").values(state="REFUNDED"))
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(update(Case).where(Case.id == "case_a").values(state="DENIED"))
