"""Multi-step account operations whose steps need their own transactions."""

from __future__ import annotations

import datetime as dt

from mercato.accounts import service
from mercato.accounts.errors import InvalidCredentials, InvalidRefreshToken
from mercato.accounts.schemas import IssuedTokens, RefreshRefused
from mercato.db.uow import Database
from mercato.settings import Settings


def login(
    db: Database,
    *,
    email: str,
    password: str,
    client_ip: str | None,
    settings: Settings,
    now: dt.datetime,
) -> IssuedTokens:
    """Count the attempt, verify the password outside any transaction, then open a session.

    The attempt is counted as a failure before its password is verified, in one committed
    transaction that first checks the throttle under the subjects' locks (decision 0526):
    concurrent attempts never pass the limits, and a throttled attempt verifies nothing.
    Unknown emails cost the same Argon2 verification as wrong passwords; verifications run in
    the process's bounded pool (decision 0525). A success forgets its own attempt and the
    failures of its (email, address) pair only: the email's and the address's other counts
    stay, so an attack in progress stays slowed (decision 0220).
    """
    subjects = service.login_subjects(email=email, client_ip=client_ip, settings=settings)
    with db.transaction() as session:
        attempt = service.count_login_attempt(
            session, subjects=subjects, settings=settings, now=now
        )
        account = service.find_account_by_email(session, email=email)
        account_id = account.id if account is not None else None
        stored_hash = account.password_hash if account is not None else None
    if not service.verify_password(stored_hash, password, settings=settings) or account_id is None:
        raise InvalidCredentials()
    assert stored_hash is not None
    new_hash = service.rehash_if_needed(stored_hash, password, settings=settings)
    with db.transaction() as session:
        service.forget_login_attempt(session, attempt_ids=attempt)
        service.clear_login_failures(session, subject=subjects.pair)
        if new_hash is not None:
            service.set_password_hash(session, account_id=account_id, password_hash=new_hash)
        return service.start_session(session, account_id=account_id, settings=settings, now=now)


def refresh(
    db: Database, *, refresh_token: str, settings: Settings, now: dt.datetime
) -> IssuedTokens:
    """Rotate a refresh token; a refusal (and any family revocation) is committed first."""
    with db.transaction() as session:
        outcome = service.rotate_refresh_token(
            session, refresh_token=refresh_token, settings=settings, now=now
        )
    if isinstance(outcome, RefreshRefused):
        raise InvalidRefreshToken(_REFUSAL_MESSAGES[outcome.reason])
    return outcome


_REFUSAL_MESSAGES = {
    "unknown": "The refresh token is not valid.",
    "expired": "The refresh token has expired; log in again.",
    "revoked": "The session has ended; log in again.",
    "reused": "The refresh token was already used; the session has been ended.",
}
