"""SqlIdempotencyStore semantics on SQLite and PostgreSQL (spec 3.2, 4.2 rule 7)."""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from pathlib import Path

import pytest

from mercato.protocol import Envelope, Outcome
from mercato.provider import IdempotencyStore, SqlIdempotencyStore, StoreUnavailable
from provider_sdk.support import PG_ADMIN_URL, drop_postgres_database


def _accept(store: SqlIdempotencyStore, key: str = "k1", fingerprint: str = "f" * 64):
    return store.accept(key=key, fingerprint=fingerprint, payload=b'{"a":1}', correlation_id="c1")


@pytest.fixture
def store(store_url: str):
    the_store = SqlIdempotencyStore(store_url)
    yield the_store
    the_store.close()


def test_accept_creates_once_and_then_returns_the_existing_record(store) -> None:
    assert isinstance(store, IdempotencyStore)
    record, created = _accept(store)
    assert created and not record.is_final
    again, created_again = store.accept(
        key="k1", fingerprint="e" * 64, payload=b'{"b":2}', correlation_id="c2"
    )
    assert not created_again
    assert (again.fingerprint, again.payload, again.correlation_id) == ("f" * 64, b'{"a":1}', "c1")


def test_finish_stores_the_envelope_once(store) -> None:
    _accept(store)
    first = store.finish(key="k1", envelope=Envelope(Outcome.SUCCEEDED, "c1", result={"n": 1}))
    assert first.is_final and first.http_status == 200
    assert first.body == b'{"outcome":"SUCCEEDED","correlationId":"c1","result":{"n":1}}'
    second = store.finish(
        key="k1",
        envelope=Envelope(Outcome.DEFINED_FAILURE, "c1", error_code="LATE", http_status=400),
    )
    assert second.body == first.body
    assert store.list_accepted() == []


def test_get_unknown_key_is_none_and_writes_nothing(store) -> None:
    assert store.get("never") is None
    assert store.get("never") is None
    assert store.list_accepted() == []


def test_records_survive_a_restart(store_url: str) -> None:
    first = SqlIdempotencyStore(store_url)
    _accept(first, key="accepted-only")
    first.close()
    second = SqlIdempotencyStore(store_url)
    try:
        record = second.get("accepted-only")
        assert record is not None and not record.is_final
        assert [r.key for r in second.list_accepted()] == ["accepted-only"]
    finally:
        second.close()


def test_concurrent_accepts_of_one_key_create_exactly_one_record(store) -> None:
    barrier = threading.Barrier(20)
    results: list[bool] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            _, created = store.accept(
                key="shared", fingerprint="f" * 64, payload=b"{}", correlation_id=f"c{n}"
            )
            results.append(created)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(results) == [False] * 19 + [True]


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(ValueError):
        SqlIdempotencyStore("sqlite:///:memory:")


def test_a_vanished_store_is_unavailable_not_empty(
    disposable_store_url: str, tmp_path: Path
) -> None:
    store_url = disposable_store_url
    store = SqlIdempotencyStore(store_url)
    _accept(store)
    if store_url.startswith("sqlite"):
        shutil.rmtree(tmp_path / "provider")
    else:
        store.close()
        drop_postgres_database(store_url)
    with pytest.raises(StoreUnavailable) as info:
        store.get("k1")
    assert info.value.nothing_written
    with pytest.raises(StoreUnavailable):
        store.check()
    with pytest.raises(StoreUnavailable) as refused:
        _accept(store, key="k2")
    assert refused.value.nothing_written
    if store_url.startswith("sqlite"):
        assert not (tmp_path / "provider").exists()
    store.close()


def test_taken_key_that_cannot_be_read_is_never_reported_as_nothing_written(store_url) -> None:
    class UnreadableStore(SqlIdempotencyStore):
        def get(self, key: str):
            raise StoreUnavailable("read failed", nothing_written=True)

    store = UnreadableStore(store_url)
    try:
        _accept(store)
        with pytest.raises(StoreUnavailable) as info:
            _accept(store)
        assert not info.value.nothing_written
    finally:
        store.close()


@pytest.mark.parametrize("url", ["mysql://h/db", "sqlite://", "sqlite:///store.db?mode=ro"])
def test_an_unusable_store_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        SqlIdempotencyStore(url)


def test_a_postgresql_store_without_psycopg_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(ValueError, match=r"mercato-provider\[postgres\]"):
        SqlIdempotencyStore("postgresql://nobody@127.0.0.1:1/none")


def test_pooled_postgresql_connections_survive_a_server_side_disconnect(
    _sdk_postgres: str,
) -> None:
    """A pooled connection the server dropped (a restart, an idle timeout) is replaced at
    checkout, not handed to the next call (the ping SQLAlchemy's pool_pre_ping used to do)."""
    import psycopg

    url = _sdk_postgres.replace("postgresql+psycopg://", "postgres://")  # the short scheme too
    store = SqlIdempotencyStore(url)
    try:
        _accept(store, key="before")
        name = url.rsplit("/", 1)[1]
        admin = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(admin, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
        assert ended, "the store kept no connection to drop"
        record = store.get("before")
        assert record is not None and record.key == "before"
        assert _accept(store, key="after")[1] is True
    finally:
        store.close()
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(url.replace("postgres://", "postgresql://")) as conn,
        ):
            conn.execute("DROP TABLE IF EXISTS mercato_provider_idempotency")
            conn.commit()


def test_an_exhausted_pool_is_unavailable_and_says_what_it_wrote(tmp_path: Path) -> None:
    """Every connection in use: the accepted marker provably wrote nothing, the final outcome's
    write claims nothing (as when the database itself cannot be reached)."""
    store = SqlIdempotencyStore(str(tmp_path / "store.db"))
    _accept(store)
    pool = store._pool
    held = [pool.checkout() for _ in range(8 + 32)]
    pool.timeout = 0  # no free slot will come: fail at once instead of after 30 s
    try:
        with pytest.raises(StoreUnavailable) as accepting:
            _accept(store, key="k2")
        assert accepting.value.nothing_written
        with pytest.raises(StoreUnavailable) as finishing:
            store.finish(key="k1", envelope=Envelope(Outcome.SUCCEEDED, "c1", result={}))
        assert not finishing.value.nothing_written
    finally:
        for conn in held:
            pool.checkin(conn, reuse=True)
    assert store.get("k2") is None and not store.get("k1").is_final
    store.close()
