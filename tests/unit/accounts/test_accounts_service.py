"""Account service functions against a real database (both backends)."""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select

from mercato.accounts import flows, service
from mercato.accounts.errors import (
    AccountExists,
    AccountNotFound,
    ApiKeyNotFound,
    InvalidCredentials,
    InvalidEmail,
    LoginThrottled,
)
from mercato.accounts.models import Account, ApiKey, LoginAttempt
from mercato.accounts.schemas import IssuedTokens, RefreshRefused
from mercato.core.errors import Unauthenticated
from mercato.db.uow import Database
from mercato.settings import Settings

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def _account(db: Database, email: str = "Alice@Example.com") -> str:
    with db.transaction() as s:
        return service.create_account(
            s, email=email, password="a long password", is_staff=False, now=T0
        ).id


def test_create_account_normalises_email_and_hashes_password(db: Database) -> None:
    account_id = _account(db)
    with db.read() as s:
        account = service.get_account_by_email(s, email="ALICE@example.com ")
        assert account.id == account_id
        assert account.email == "alice@example.com"
        assert account.password_hash is not None
        assert account.password_hash.startswith("$argon2id$")
        assert "a long password" not in account.password_hash


def test_duplicate_and_invalid_emails_are_refused(db: Database) -> None:
    _account(db)
    with pytest.raises(AccountExists), db.transaction() as s:
        service.create_account(s, email="alice@EXAMPLE.com", password=None, is_staff=False, now=T0)
    with pytest.raises(InvalidEmail), db.transaction() as s:
        service.create_account(s, email="not-an-email", password=None, is_staff=False, now=T0)
    with pytest.raises(AccountNotFound), db.read() as s:
        service.get_account_by_email(s, email="bob@example.com")


def test_api_key_is_stored_as_digest_only(db: Database) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        created = service.create_api_key(s, account_id=account_id, name="ci", now=T0)
    with db.read() as s:
        row = s.scalars(select(ApiKey)).one()
        assert row.digest == service.token_digest(created.api_key)
        values = [row.id, row.account_id, row.name, row.digest]
        assert all(created.api_key not in str(v) for v in values)
    with db.transaction() as s:  # resolving records the key's last use
        principal = service.resolve_api_key(s, api_key=created.api_key, now=T0)
    assert principal.account_id == account_id
    assert principal.channel == "API_KEY"
    assert principal.key_id == created.key_id


def test_revocation_is_permanent_and_idempotent(db: Database) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        created = service.create_api_key(s, account_id=account_id, name="ci", now=T0)
    with db.transaction() as s:
        first = service.revoke_api_key(s, key_id=created.key_id, account_id=account_id, now=T0)
        assert first.revoked_at == T0
    later = T0 + dt.timedelta(hours=1)
    with db.transaction() as s:
        again = service.revoke_api_key(s, key_id=created.key_id, account_id=None, now=later)
        assert again.revoked_at == T0
    with pytest.raises(Unauthenticated), db.transaction() as s:
        service.resolve_api_key(s, api_key=created.api_key, now=later)


def test_revoking_someone_elses_key_is_not_found(db: Database) -> None:
    owner = _account(db)
    other = _account(db, "mallory@example.com")
    with db.transaction() as s:
        created = service.create_api_key(s, account_id=owner, name="ci", now=T0)
    with pytest.raises(ApiKeyNotFound), db.transaction() as s:
        service.revoke_api_key(s, key_id=created.key_id, account_id=other, now=T0)
    with db.read() as s:
        assert s.get(ApiKey, created.key_id).revoked_at is None  # type: ignore[union-attr]


def test_last_used_is_written_at_most_once_a_minute(db: Database) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        created = service.create_api_key(s, account_id=account_id, name="ci", now=T0)

    def use(at: dt.datetime) -> dt.datetime | None:
        with db.transaction() as s:
            service.resolve_api_key(s, api_key=created.api_key, now=at)
        with db.read() as s:
            return s.get(ApiKey, created.key_id).last_used_at  # type: ignore[union-attr]

    assert use(T0) == T0
    assert use(T0 + dt.timedelta(seconds=30)) == T0
    assert use(T0 + dt.timedelta(seconds=61)) == T0 + dt.timedelta(seconds=61)


def test_refresh_rotation_and_reuse_revokes_family(db: Database, settings: Settings) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        first = service.start_session(s, account_id=account_id, settings=settings, now=T0)
    with db.transaction() as s:
        second = service.rotate_refresh_token(
            s, refresh_token=first.refresh_token, settings=settings, now=T0
        )
    assert isinstance(second, IssuedTokens) and second.family_id == first.family_id
    with db.transaction() as s:
        replay = service.rotate_refresh_token(
            s, refresh_token=first.refresh_token, settings=settings, now=T0
        )
    assert replay == RefreshRefused("reused")
    with db.transaction() as s:
        after = service.rotate_refresh_token(
            s, refresh_token=second.refresh_token, settings=settings, now=T0
        )
    assert after == RefreshRefused("revoked")
    with pytest.raises(Unauthenticated), db.read() as s:
        service.resolve_access_token(s, token=second.access_token, settings=settings, now=T0)


def test_expired_refresh_token_is_refused(db: Database, settings: Settings) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        pair = service.start_session(s, account_id=account_id, settings=settings, now=T0)
    late = T0 + dt.timedelta(seconds=settings.refresh_token_ttl_seconds)
    with db.transaction() as s:
        outcome = service.rotate_refresh_token(
            s, refresh_token=pair.refresh_token, settings=settings, now=late
        )
    assert outcome == RefreshRefused("expired")


def test_login_throttle_window_and_retry_after(db: Database, settings: Settings) -> None:
    limit = settings.login_attempts_per_window
    subjects = service.login_subjects(
        email="alice@example.com", client_ip="192.0.2.1", settings=settings
    )
    for i in range(limit):
        with db.transaction() as s:
            service.check_login_allowed(s, subjects=subjects, settings=settings, now=T0)
            service.record_login_failure(
                s, subjects=subjects, settings=settings, now=T0 + dt.timedelta(seconds=i)
            )
    probe = T0 + dt.timedelta(seconds=limit)
    with pytest.raises(LoginThrottled) as caught, db.read() as s:
        service.check_login_allowed(s, subjects=subjects, settings=settings, now=probe)
    window = settings.login_window_seconds
    assert caught.value.code == "LOGIN_THROTTLED"
    assert caught.value.headers["Retry-After"] == str(window - limit)
    # Once the oldest failure leaves the window, one more attempt is allowed.
    with db.read() as s:
        service.check_login_allowed(
            s, subjects=subjects, settings=settings, now=T0 + dt.timedelta(seconds=window)
        )


def test_throttle_subjects_hold_no_readable_email_or_address(settings: Settings) -> None:
    subjects = service.login_subjects(
        email=" Alice@Example.com", client_ip="192.0.2.1", settings=settings
    )
    same = service.login_subjects(
        email="alice@example.com", client_ip="192.0.2.1", settings=settings
    )
    assert subjects == same
    for subject in (subjects.email, subjects.address, subjects.pair):
        assert len(subject) == 64 and "alice" not in subject and "192" not in subject
    # A pair starts with its email's digest: `unlock` finds an email's pairs by prefix.
    assert subjects.pair[2:33] == subjects.email[2:33]
    assert subjects.pair[33:] == subjects.address[2:33]


@pytest.mark.parametrize(
    ("peer", "counted"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        (None, "unknown"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_site_counts_as_one_address(peer: str | None, counted: str) -> None:
    assert service.throttle_address(peer) == counted


def test_account_table_keeps_no_plaintext_password(db: Database) -> None:
    _account(db)
    with db.read() as s:
        account = s.scalars(select(Account)).one()
        assert "a long password" not in repr(account.__dict__)


class _CountingHasher:
    """Wraps the real hasher and counts verifications."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.verified = 0

    def verify(self, stored: str, password: str) -> bool:
        self.verified += 1
        return bool(self.inner.verify(stored, password))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_unknown_email_costs_the_same_argon2_work(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _account(db)
    counting = _CountingHasher(service._hasher)
    monkeypatch.setattr(service, "_hasher", counting)
    outcomes = []
    for email, password in [
        ("alice@example.com", "a wrong password"),
        ("nobody@example.com", "a long password"),
    ]:
        with pytest.raises(InvalidCredentials) as caught:
            flows.login(
                db, email=email, password=password, client_ip=None, settings=settings, now=T0
            )
        outcomes.append((caught.value.code, caught.value.message))
    assert counting.verified == 2
    assert outcomes[0] == outcomes[1]
    tokens = flows.login(
        db,
        email="alice@example.com",
        password="a long password",
        client_ip=None,
        settings=settings,
        now=T0,
    )
    assert counting.verified == 3 and tokens.access_token.startswith("mercato_at_")


def test_a_refresh_token_is_spent_at_most_once_under_concurrency(
    db: Database, settings: Settings
) -> None:
    account_id = _account(db)
    with db.transaction() as s:
        pair = service.start_session(s, account_id=account_id, settings=settings, now=T0)
    workers = 6
    barrier = threading.Barrier(workers)

    def attempt() -> IssuedTokens | RefreshRefused:
        barrier.wait(timeout=30)
        with db.transaction() as s:
            return service.rotate_refresh_token(
                s, refresh_token=pair.refresh_token, settings=settings, now=T0
            )

    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(lambda _: attempt(), range(workers)))
    issued = [o for o in outcomes if isinstance(o, IssuedTokens)]
    assert len(issued) == 1
    # The first loser detects reuse and ends the family; later ones find it revoked.
    refusals = sorted(o.reason for o in outcomes if isinstance(o, RefreshRefused))
    assert refusals[0] == "reused" and set(refusals) <= {"reused", "revoked"}
    with pytest.raises(Unauthenticated), db.read() as s:
        service.resolve_access_token(s, token=issued[0].access_token, settings=settings, now=T0)


def test_failures_outside_the_window_are_forgotten(db: Database, settings: Settings) -> None:
    old = service.login_subjects(email="old@example.com", client_ip="192.0.2.9", settings=settings)
    new = service.login_subjects(email="new@example.com", client_ip=None, settings=settings)
    with db.transaction() as s:
        service.record_login_failure(s, subjects=old, settings=settings, now=T0)
    later = T0 + dt.timedelta(seconds=settings.login_window_seconds)
    with db.transaction() as s:
        service.record_login_failure(s, subjects=new, settings=settings, now=later)
    with db.read() as s:
        subjects = set(s.scalars(select(LoginAttempt.subject)))
    assert subjects == {new.email, new.address, new.pair}
