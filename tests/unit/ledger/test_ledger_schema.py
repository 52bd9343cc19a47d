"""The database itself keeps the ledger's rules, whatever code talks to it."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from builders.ledger import book, ledger_account, verified
from mercato.core.clock import utcnow
from mercato.db.uow import Database
from mercato.ledger import service


def _seed(db: Database) -> str:
    caller = ledger_account(db, "caller")
    with db.transaction() as session:
        service.grant(session, account_id=caller, amount=100, now=utcnow())
    return caller


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_entries SET amount = amount * 2",
        "DELETE FROM ledger_entries",
        "UPDATE ledger_transfers SET memo = 'rewritten'",
        "DELETE FROM ledger_transfers",
    ],
)
def test_entries_and_transfers_are_append_only(db: Database, statement: str) -> None:
    caller = _seed(db)
    with pytest.raises(DBAPIError) as refused, db.transaction() as session:
        session.execute(text(statement))
    assert "append-only" in str(refused.value)
    assert book(db, caller).available == {caller: 100}
    assert verified(db).balanced


def test_a_negative_available_balance_is_refused_by_the_schema(db: Database) -> None:
    caller = _seed(db)
    with pytest.raises(DBAPIError), db.transaction() as session:
        session.execute(
            text("UPDATE ledger_accounts SET balance = -1 WHERE owner = :owner"),
            {"owner": caller},
        )
    assert book(db, caller).available == {caller: 100}


@pytest.mark.postgres_only
def test_postgres_refuses_to_commit_a_transfer_that_does_not_balance(db: Database) -> None:
    caller = _seed(db)
    with db.read() as session:
        account_id = session.execute(
            text("SELECT id FROM ledger_accounts WHERE owner = :owner"), {"owner": caller}
        ).scalar_one()
    with pytest.raises(DBAPIError) as refused, db.transaction() as session:
        session.execute(
            text(
                "INSERT INTO ledger_transfers (id, kind, reference, memo, created_at) "
                "VALUES ('trf_forged', 'grant', NULL, '', now())"
            )
        )
        session.execute(
            text(
                "INSERT INTO ledger_entries (id, transfer_id, ledger_account_id, amount) "
                "VALUES ('ent_forged', 'trf_forged', :account, 5)"
            ),
            {"account": account_id},
        )
    assert "does not balance" in str(refused.value)
    assert verified(db).balanced


def test_verify_reports_a_tampered_cached_balance(db: Database) -> None:
    caller = _seed(db)
    with db.transaction() as session:
        session.execute(
            text("UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = :owner"),
            {"owner": caller},
        )
    report = verified(db)
    assert not report.balanced
    assert any(
        "caches 101 but its entries and reservations sum to 100" in p for p in report.problems
    )
    assert any("circulation (101)" in p for p in report.problems)


def test_verify_reports_a_release_that_skipped_the_ledger(db: Database) -> None:
    caller = _seed(db)
    with db.transaction() as session:
        held = service.reserve(
            session, account_id=caller, amount=10, reference="inv_1", now=utcnow()
        )
        # Forge a resolution that skipped the ledger.
        session.execute(
            text("UPDATE reservations SET state = 'RELEASED' WHERE id = :id"), {"id": held}
        )
    report = verified(db)
    assert not report.balanced
    # The release voided the pending transfer, so its 10 points count as available again,
    # but the cached balance never got them back.
    assert any(
        "caches 90 but its entries and reservations sum to 100" in p for p in report.problems
    )
