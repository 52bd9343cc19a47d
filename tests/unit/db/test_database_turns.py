"""Database turns: at most `concurrency` threads of a process work in the database at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from builders.platform_process import wait_for
from mercato.db.engine import make_engine
from mercato.db.uow import Database


@pytest.fixture
def make_db(db_url: str) -> Iterator[Callable[[int], Database]]:
    made: list[Database] = []

    def make(concurrency: int) -> Database:
        db = Database(make_engine(db_url), concurrency=concurrency)
        made.append(db)
        return db

    yield make
    for db in made:
        db.dispose()


def test_a_thread_that_nests_a_read_in_its_transaction_takes_one_turn(
    make_db: Callable[[int], Database],
) -> None:
    db = make_db(1)
    with db.transaction() as outer, db.read() as inner:  # would wait for ever with two turns
        assert inner.execute(text("SELECT 1")).scalar_one() == 1
        assert outer.execute(text("SELECT 2")).scalar_one() == 2
        assert db.turns() == (1, 0)
    assert db.turns() == (0, 0)


def test_a_thread_waits_for_a_turn_and_gets_it_when_one_is_given_back(
    make_db: Callable[[int], Database],
) -> None:
    db = make_db(1)
    release, second_entered = threading.Event(), threading.Event()

    def hold() -> None:
        with db.read():
            release.wait(30)

    def second() -> None:
        with db.read():
            second_entered.set()

    holder = threading.Thread(target=hold)
    holder.start()
    wait_for(lambda: db.turns() == (1, 0), what="the holder's turn")
    waiter = threading.Thread(target=second)
    waiter.start()
    wait_for(lambda: db.turns() == (1, 1), what="a queued second thread")  # not working yet
    assert not second_entered.is_set()
    release.set()
    holder.join(30)
    waiter.join(30)
    assert second_entered.is_set() and db.turns() == (0, 0)


def test_a_failed_transaction_gives_its_turn_back(make_db: Callable[[int], Database]) -> None:
    db = make_db(1)
    with pytest.raises(RuntimeError), db.transaction():
        raise RuntimeError("boom")
    with db.read() as session:  # the only turn is free again
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def test_zero_means_no_limit(make_db: Callable[[int], Database]) -> None:
    db = make_db(0)
    with db.read(), db.read():
        pass
    held = threading.Barrier(3)

    def inside() -> None:
        with db.read():
            held.wait(30)  # all three are inside at once

    threads = [threading.Thread(target=inside) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside_main = threading.Thread(target=inside)
    inside_main.start()
    for thread in [*threads, inside_main]:
        thread.join(30)
    assert not held.broken and db.turns() == (0, 0)
