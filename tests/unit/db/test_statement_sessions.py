"""One-statement sessions (decision 0191): on PostgreSQL one atomic statement without BEGIN or
COMMIT, and never a second one; on SQLite an ordinary transaction."""

from __future__ import annotations

import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import IntegrityError

from mercato.accounts.models import Account
from mercato.core.clock import utcnow
from mercato.db.uow import Database, StatementSessionReused


def _row(label: str) -> dict[str, object]:
    return {
        "id": f"acc_{label}",
        "email": f"{label}@example.com",
        "password_hash": None,
        "is_staff": False,
        "created_at": utcnow(),
    }


def _ids(db: Database) -> list[str]:
    with db.read() as session:
        return list(session.execute(select(Account.id).order_by(Account.id)).scalars())


@pytest.mark.postgres_only
def test_on_postgresql_the_statement_commits_on_its_own_and_a_second_is_refused(
    db: Database,
) -> None:
    with db.statement() as session:
        session.execute(insert(Account).values(**_row("first")))
        driver = session.connection().connection.driver_connection
        assert driver is not None
        assert driver.info.transaction_status is TransactionStatus.IDLE  # no BEGIN was sent
        with pytest.raises(StatementSessionReused):
            session.execute(insert(Account).values(**_row("second")))
    # The first committed by itself; the second never reached the database.
    assert _ids(db) == ["acc_first"]


@pytest.mark.postgres_only
def test_on_postgresql_a_refused_statement_leaves_nothing(db: Database) -> None:
    # One statement that writes two rows, the second of which breaks a constraint: PostgreSQL
    # takes back the first as well, which is what the server-side accept relies on.
    twice = text(
        "INSERT INTO accounts (id, email, is_staff, created_at) VALUES "
        "('acc_a', 'a@example.com', false, now()), ('acc_a', 'b@example.com', false, now())"
    )
    with pytest.raises(IntegrityError), db.statement() as session:
        session.execute(twice)
    assert _ids(db) == []


@pytest.mark.sqlite_only
def test_on_sqlite_it_is_one_transaction(db: Database) -> None:
    with pytest.raises(RuntimeError, match="taken back"), db.statement() as session:
        session.execute(insert(Account).values(**_row("first")))
        session.execute(insert(Account).values(**_row("second")))
        assert session.execute(select(func.count()).select_from(Account)).scalar_one() == 2
        raise RuntimeError("taken back")
    assert _ids(db) == []
    with db.statement() as session:
        session.execute(insert(Account).values(**_row("first")))
        session.execute(insert(Account).values(**_row("second")))
    assert _ids(db) == ["acc_first", "acc_second"]
