"""Read sessions (decision 0187): they never write, hold no transaction on PostgreSQL, and do not
queue behind a writer on SQLite."""

from __future__ import annotations

import threading

import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import func, select, text, update

from mercato.accounts.models import Account
from mercato.core.clock import utcnow
from mercato.db.uow import Database, ReadSessionWrote


def _account(label: str) -> Account:
    return Account(
        id=f"acc_{label}",
        email=f"{label}@example.com",
        password_hash=None,
        is_staff=False,
        created_at=utcnow(),
    )


def _accounts(db: Database) -> int:
    with db.read() as session:
        return session.execute(select(func.count()).select_from(Account)).scalar_one()


def test_a_read_session_refuses_to_write(db: Database) -> None:
    with db.transaction() as session:
        session.add(_account("kept"))
    with pytest.raises(ReadSessionWrote), db.read() as session:
        session.add(_account("added"))
        session.flush()
    with pytest.raises(ReadSessionWrote), db.read() as session:
        session.execute(update(Account).values(is_staff=True))
    with db.read() as session:
        rows = session.execute(select(Account.id, Account.is_staff)).all()
    assert [tuple(row) for row in rows] == [("acc_kept", False)]


@pytest.mark.postgres_only
def test_on_postgresql_a_read_runs_without_a_transaction(db: Database) -> None:
    with db.read() as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
        driver = session.connection().connection.driver_connection
        assert driver is not None
        assert driver.info.transaction_status is TransactionStatus.IDLE  # no BEGIN was sent
    with db.transaction() as session:
        session.execute(text("SELECT 1"))
        driver = session.connection().connection.driver_connection
        assert driver is not None
        assert driver.info.transaction_status is TransactionStatus.INTRANS


def test_a_read_does_not_wait_for_an_open_write_transaction(db: Database) -> None:
    # On SQLite every write transaction holds the writer lock from BEGIN IMMEDIATE; a read
    # begins DEFERRED and reads its snapshot beside it (WAL) instead of queueing.
    holding, finished = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with db.transaction() as session:
                session.add(_account("pending"))
                session.flush()
                holding.set()
                finished.wait(30)
        except BaseException as error:  # surfaced below
            errors.append(error)
            holding.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(30)
        assert _accounts(db) == 0  # answered while the writer is still open
    finally:
        finished.set()
        thread.join(30)
    assert not errors
    assert _accounts(db) == 1


def test_a_read_leaves_no_transaction_open_behind_it(db: Database) -> None:
    # A transaction left open on a pooled connection would pin an old snapshot (and, on SQLite,
    # hold back WAL checkpoints) until the connection's next use.
    with db.read() as session:
        session.execute(select(func.count()).select_from(Account))
        driver = session.connection().connection.driver_connection
    assert driver is not None
    if db.engine.dialect.name == "sqlite":
        assert not driver.in_transaction
    else:
        assert driver.info.transaction_status is TransactionStatus.IDLE
