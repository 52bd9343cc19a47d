"""Accounts, passwords, API keys, session tokens and login throttling.

Plain functions over an explicit session; they never commit. Secrets (passwords, API keys,
refresh tokens) are only ever stored as digests: Argon2id for passwords, SHA-256 for the
high-entropy tokens, whose randomness makes a slow hash unnecessary.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import string
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, cast

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import (
    Table,
    bindparam,
    case,
    delete,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from mercato.accounts.errors import (
    AccountExists,
    AccountNotFound,
    ApiKeyNotFound,
    InvalidApiKeyName,
    InvalidEmail,
    InvalidPassword,
    LoginThrottled,
    SignupThrottled,
)
from mercato.accounts.models import (
    Account,
    ApiKey,
    LoginAttempt,
    RefreshToken,
    SessionFamily,
    Signup,
)
from mercato.accounts.schemas import (
    CreatedApiKey,
    IssuedTokens,
    LoginSubjects,
    Principal,
    RefreshRefused,
)
from mercato.core.errors import Unauthenticated
from mercato.core.ids import new_id
from mercato.db.plans import Plan, Rows, first, query
from mercato.db.uow import Database
from mercato.settings import Settings

_MAX_CREDENTIAL_LENGTH = 512
API_KEY_PREFIX = "mercato_live_"
ACCESS_TOKEN_PREFIX = "mercato_at_"
REFRESH_TOKEN_PREFIX = "mercato_rt_"
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
RANDOM_LENGTH = 43  # 43 * log2(62) ≈ 256 bits
PASSWORD_MIN_LENGTH = 8
PASSWORD_MAX_LENGTH = 1024
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)

_API_KEY_RE = re.compile(rf"^{API_KEY_PREFIX}[0-9A-Za-z]{{{RANDOM_LENGTH}}}$")
_REFRESH_RE = re.compile(rf"^{REFRESH_TOKEN_PREFIX}[0-9A-Za-z]{{{RANDOM_LENGTH}}}$")
_ACCESS_RE = re.compile(
    rf"^({ACCESS_TOKEN_PREFIX}([a-z0-9_]{{1,40}})\.([a-z0-9_]{{1,40}})\.([0-9]{{1,12}}))"
    r"\.([A-Za-z0-9_-]{43})$"
)
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")

_hasher = PasswordHasher()  # Argon2id with argon2-cffi's RFC 9106 low-memory profile


@lru_cache(maxsize=4)
def _hasher_with(memory_kib: int) -> PasswordHasher:
    return _hasher if memory_kib == _hasher.memory_cost else PasswordHasher(memory_cost=memory_kib)


def _hasher_for(settings: Settings | None) -> PasswordHasher:
    """The hasher new hashes are made with: the settings' memory cost (no settings: the profile)."""
    return _hasher if settings is None else _hasher_with(settings.password_hash_memory_kib)


class HashPool:
    """At most `size` Argon2 computations at once in this process (decision 0525): each one
    takes `password_hash_memory_kib` of memory (64 MiB by default), so a burst of logins or
    sign-ups queues here instead of taking a request thread's share of memory each.

    `running` and `waiting` say how many computations hold a slot and how many wait for one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.running = 0
        self.waiting = 0
        self._changed = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._changed:
            self.waiting += 1
            self._changed.notify_all()  # every change: a watcher (`wait_for`) may count it
            try:
                while self.running >= self.size:
                    self._changed.wait()
            finally:
                self.waiting -= 1
            self.running += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self.running -= 1
                self._changed.notify_all()

    def wait_for(self, predicate: Callable[[HashPool], bool], timeout: float) -> bool:
        """Wait until `predicate(self)` holds (True), or `timeout` seconds (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)


@lru_cache(maxsize=8)
def _pool_of(size: int) -> HashPool:
    return HashPool(size)


def hash_pool(settings: Settings | None) -> HashPool:
    """This process's pool of Argon2 slots of the size the settings give (decision 0525)."""
    return _pool_of(
        settings.password_hash_slots if settings is not None else Settings.derived_hash_slots()
    )


# --- accounts and passwords -------------------------------------------------------------


def normalize_email(email: str) -> str:
    """Return the canonical (trimmed, lower-case) form of an email address."""
    return email.strip().lower()


def hash_password(password: str, *, settings: Settings | None = None) -> str:
    """Return the Argon2id hash of `password`, refusing unusable passwords."""
    if not PASSWORD_MIN_LENGTH <= len(password) <= PASSWORD_MAX_LENGTH:
        raise InvalidPassword(
            f"A password has {PASSWORD_MIN_LENGTH} to {PASSWORD_MAX_LENGTH} characters."
        )
    with hash_pool(settings).slot():
        return _hasher_for(settings).hash(password)


@lru_cache(maxsize=4)
def _dummy_hash(memory_kib: int) -> str:
    return _hasher_with(memory_kib).hash(secrets.token_urlsafe(16))


def verify_password(
    password_hash: str | None, password: str, *, settings: Settings | None = None
) -> bool:
    """Check `password`; without a stored hash, spend the same work and return False.

    A stored hash is checked with its own parameters; the stand-in costs what a new hash does.
    """
    memory_kib = _hasher_for(settings).memory_cost
    with hash_pool(settings).slot():
        stored = password_hash or _dummy_hash(memory_kib)
        try:
            return _hasher.verify(stored, password) and bool(password_hash)
        except (VerificationError, InvalidHashError):
            return False


def rehash_if_needed(
    password_hash: str, password: str, *, settings: Settings | None = None
) -> str | None:
    """A fresh hash when the stored one uses other parameters than new hashes get, else None."""
    hasher = _hasher_for(settings)
    if not hasher.check_needs_rehash(password_hash):
        return None
    with hash_pool(settings).slot():
        return hasher.hash(password)


def create_account(
    session: Session,
    *,
    email: str,
    password: str | None,
    is_staff: bool,
    now: dt.datetime,
    settings: Settings | None = None,
    password_hash: str | None = None,
) -> Account:
    """Create an account; without a password it cannot log in. `password_hash`: the
    password's hash made beforehand (`hash_password`, outside the transaction), instead of
    `password`."""
    address = checked_email(email)
    if session.scalar(select(Account.id).where(Account.email == address)) is not None:
        raise AccountExists()
    account = Account(
        id=new_id("acct"),
        email=address,
        password_hash=(
            hash_password(password, settings=settings) if password is not None else password_hash
        ),
        is_staff=is_staff,
        created_at=now,
    )
    session.add(account)
    session.flush()
    return account


def checked_email(email: str) -> str:
    """The canonical form of `email`, or InvalidEmail when it cannot be an address."""
    address = normalize_email(email)
    if len(address) > 254 or not _EMAIL_RE.match(address):
        raise InvalidEmail("Give an email address like name@example.com.")
    return address


def find_account_by_email(session: Session, *, email: str) -> Account | None:
    return session.scalar(select(Account).where(Account.email == normalize_email(email)))


def get_account_by_email(session: Session, *, email: str) -> Account:
    """Return the account with this email or raise AccountNotFound."""
    account = find_account_by_email(session, email=email)
    if account is None:
        raise AccountNotFound()
    return account


def get_account(session: Session, *, account_id: str) -> Account:
    account = session.get(Account, account_id)
    if account is None:
        raise AccountNotFound()
    return account


def set_password_hash(session: Session, *, account_id: str, password_hash: str) -> None:
    get_account(session, account_id=account_id).password_hash = password_hash


# --- secrets shared by API keys and refresh tokens --------------------------------------


def generate_secret(prefix: str) -> str:
    """Return `prefix` + 43 base62 characters from the OS CSPRNG (about 256 bits)."""
    return prefix + "".join(secrets.choice(BASE62) for _ in range(RANDOM_LENGTH))


def token_digest(token: str) -> str:
    """SHA-256 lowercase hex of a token's plaintext; the only form that is stored."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


# --- API keys ---------------------------------------------------------------------------


def create_api_key(
    session: Session, *, account_id: str, name: str, now: dt.datetime
) -> CreatedApiKey:
    """Create a key for the account; the plaintext is returned here and never again."""
    clean = name.strip()
    if not 1 <= len(clean) <= 100 or not clean.isprintable():
        raise InvalidApiKeyName("A key name has 1 to 100 printable characters.")
    get_account(session, account_id=account_id)
    plaintext = generate_secret(API_KEY_PREFIX)
    key = ApiKey(
        id=new_id("key"),
        account_id=account_id,
        name=clean,
        digest=token_digest(plaintext),
        created_at=now,
    )
    session.add(key)
    session.flush()
    return CreatedApiKey(api_key=plaintext, key_id=key.id, name=key.name, created_at=now)


def list_api_keys(session: Session, *, account_id: str) -> Sequence[ApiKey]:
    """The account's keys (metadata only), oldest first."""
    query = select(ApiKey).where(ApiKey.account_id == account_id).order_by(ApiKey.id)
    return session.scalars(query).all()


def revoke_api_key(
    session: Session, *, key_id: str, account_id: str | None, now: dt.datetime
) -> ApiKey:
    """Revoke for ever; `account_id` scopes the lookup (None: operator, any account)."""
    key = session.get(ApiKey, key_id)
    if key is None or (account_id is not None and key.account_id != account_id):
        raise ApiKeyNotFound()
    if key.revoked_at is None:
        key.revoked_at = now
        session.flush()
    return key


def resolve_api_key(session: Session, *, api_key: str, now: dt.datetime) -> Principal:
    """Turn an API key plaintext into a principal, or raise Unauthenticated."""
    principal, last_used_at = _lookup_api_key(session, api_key)
    if _touch_due(last_used_at, now):
        _touch_api_key(session, key_id=principal.key_id or "", now=now)
    return principal


def authenticate_api_key(
    db: Database, session: Session, *, api_key: str, now: dt.datetime
) -> Principal:
    """`resolve_api_key` for a request: one read, and a write transaction only when the key's
    last use is due to be recorded (at most once per resolution period), so that calls do not
    queue behind each other for a write they do not need. The key is read in `session`, the
    request's read session; the write, when due, is a transaction of its own on `db`."""
    principal, last_used_at = _lookup_api_key(session, api_key)
    if _touch_due(last_used_at, now):
        with db.transaction() as session:
            _touch_api_key(session, key_id=principal.key_id or "", now=now)
    return principal


# The key and its account in one round trip (every API call runs it), built once on the tables'
# columns: a Core statement skips the ORM's execution path, which cost more than the query.
_keys, _accounts = ApiKey.__table__.c, Account.__table__.c
_KEY_BY_DIGEST = (
    select(
        _keys.id,
        _keys.digest,
        _keys.revoked_at,
        _keys.last_used_at,
        _accounts.id,
        _accounts.is_staff,
    )
    .select_from(ApiKey.__table__.join(Account.__table__, _accounts.id == _keys.account_id))
    .where(_keys.digest == bindparam("digest"))
)


def _lookup_api_key(session: Session, api_key: str) -> tuple[Principal, dt.datetime | None]:
    return lookup_api_key(session, api_key=api_key)


@query
def lookup_api_key(*, api_key: str) -> Plan[tuple[Principal, dt.datetime | None]]:
    """The principal of an API key and when its use was last recorded, or Unauthenticated
    (the read half of `authenticate_api_key`, for the async edge)."""
    return (yield from lookup_api_key_digest.plan(digest=api_key_digest(api_key)))


def bearer_token_of(header: str | None) -> str:
    """The credential of an `Authorization: Bearer <token>` header's value (None: no header),
    or Unauthenticated for anything else (refused before any database work)."""
    if header is None:
        raise Unauthenticated("Send Authorization: Bearer <API key or access token>.")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("Use the Bearer authorization scheme.")
    # Starlette decodes header bytes as Latin-1; anything outside visible ASCII is malformed.
    if len(token) > _MAX_CREDENTIAL_LENGTH or not (token.isascii() and token.isprintable()):
        raise Unauthenticated("The credential is not valid.")
    if " " in token:
        raise Unauthenticated("The credential is not valid.")
    return token


def api_key_digest(api_key: str) -> str:
    """The digest an API key is stored and looked up by; Unauthenticated when `api_key` does
    not have the form of one (refused before any database work)."""
    if not _API_KEY_RE.match(api_key):
        raise Unauthenticated("The credential is not valid.")
    return token_digest(api_key)


def key_proof(digest: Any) -> Any:
    """A column that proves, in a statement that reads something else, the API key whose
    digest is `digest` (a bind parameter): 1 when `lookup_api_key_digest` would accept it now,
    0 when it is revoked, NULL when there is no such key (read back with `key_proven`). A
    replay reads it beside its call, so a key served from memory is proven without a read
    of its own (decision 0420)."""
    return (
        select(case((_keys.revoked_at.is_(None), literal_column("1")), else_=literal_column("0")))
        .select_from(ApiKey.__table__.join(Account.__table__, _accounts.id == _keys.account_id))
        .where(_keys.digest == digest)
        .scalar_subquery()
    )


def key_proven(value: Any) -> bool:
    """Whether the `key_proof` column proves the key (else refuse it: `key_refused`)."""
    return bool(value == 1)


def key_refused() -> Unauthenticated:
    """The refusal of an API key that is unknown or revoked (`lookup_api_key_digest`)."""
    return Unauthenticated("The credential is not valid.")


@query
def lookup_api_key_digest(*, digest: str) -> Plan[tuple[Principal, dt.datetime | None]]:
    """`lookup_api_key` by the key's digest (`api_key_digest`)."""
    row = first((yield Rows(_KEY_BY_DIGEST, {"digest": digest})))
    if row is None or not hmac.compare_digest(row[1], digest) or row[2] is not None:
        raise key_refused()
    principal = Principal(account_id=row[4], channel="API_KEY", is_staff=row[5], key_id=row[0])
    return principal, row[3]


def touch_due(last_used_at: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether a key last recorded as used at `last_used_at` is due to be recorded again."""
    return last_used_at is None or last_used_at <= now - LAST_USED_RESOLUTION


_touch_due = touch_due
_TOUCH_API_KEY = (
    update(cast(Table, ApiKey.__table__))
    .where(_keys.id == bindparam("p_id"), _keys.revoked_at.is_(None))  # a use, not a try
    .where(
        or_(
            _keys.last_used_at.is_(None),
            _keys.last_used_at <= bindparam("p_cutoff", type_=_keys.last_used_at.type),
        )
    )
    .values(last_used_at=bindparam("p_now", type_=_keys.last_used_at.type))
)


@query
def touch_api_key(*, key_id: str, now: dt.datetime) -> Plan[None]:
    """Record the key's use at `now`: at most once per resolution period, and only if nobody
    else just did."""
    yield Rows(
        _TOUCH_API_KEY, {"p_id": key_id, "p_cutoff": now - LAST_USED_RESOLUTION, "p_now": now}
    )


def _touch_api_key(session: Session, *, key_id: str, now: dt.datetime) -> None:
    touch_api_key(session, key_id=key_id, now=now)


# --- sessions: access tokens and rotating refresh tokens ---------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _sign(unsigned: str, settings: Settings) -> str:
    mac = hmac.new(settings.derived_key("access-token"), unsigned.encode("ascii"), "sha256")
    return _b64(mac.digest())


def issue_access_token(
    *, account_id: str, family_id: str, expires_at: dt.datetime, settings: Settings
) -> str:
    """A self-contained signed token; still refused once its family is revoked."""
    unsigned = f"{ACCESS_TOKEN_PREFIX}{account_id}.{family_id}.{int(expires_at.timestamp())}"
    return f"{unsigned}.{_sign(unsigned, settings)}"


_families = SessionFamily.__table__.c
_FAMILY_OF = (
    select(_families.account_id, _families.revoked_at, _accounts.is_staff)
    .select_from(
        SessionFamily.__table__.join(Account.__table__, _accounts.id == _families.account_id)
    )
    .where(_families.id == bindparam("family_id"))
)


@query
def resolve_access_token(*, token: str, settings: Settings, now: dt.datetime) -> Plan[Principal]:
    """Turn a session access token into a principal, or raise Unauthenticated."""
    match = _ACCESS_RE.match(token)
    if match is None:
        raise Unauthenticated("The credential is not valid.")
    unsigned, account_id, family_id, expiry, signature = match.groups()
    if not hmac.compare_digest(_sign(unsigned, settings), signature):
        raise Unauthenticated("The credential is not valid.")
    if int(expiry) <= now.timestamp():
        raise Unauthenticated("The access token has expired.")
    family = first((yield Rows(_FAMILY_OF, {"family_id": family_id})))
    if family is None or family[0] != account_id or family[1] is not None:
        raise Unauthenticated("The session has ended.")
    return Principal(
        account_id=account_id,
        channel="SESSION",
        is_staff=bool(family[2]),
        key_id=None,
        family_id=family_id,
    )


def _issue_pair(
    session: Session, *, family: SessionFamily, settings: Settings, now: dt.datetime
) -> IssuedTokens:
    refresh = generate_secret(REFRESH_TOKEN_PREFIX)
    session.add(
        RefreshToken(
            id=new_id("rtok"),
            family_id=family.id,
            digest=token_digest(refresh),
            issued_at=now,
            expires_at=now + dt.timedelta(seconds=settings.refresh_token_ttl_seconds),
        )
    )
    session.flush()
    ttl = settings.access_token_ttl_seconds
    access = issue_access_token(
        account_id=family.account_id,
        family_id=family.id,
        expires_at=now + dt.timedelta(seconds=ttl),
        settings=settings,
    )
    return IssuedTokens(
        access_token=access, refresh_token=refresh, expires_in=ttl, family_id=family.id
    )


def start_session(
    session: Session, *, account_id: str, settings: Settings, now: dt.datetime
) -> IssuedTokens:
    """Open a new session family for the account and issue its first pair."""
    get_account(session, account_id=account_id)
    family = SessionFamily(id=new_id("sfam"), account_id=account_id, created_at=now)
    session.add(family)
    session.flush()
    return _issue_pair(session, family=family, settings=settings, now=now)


def _find_refresh_token(session: Session, token: str, *, lock: bool) -> RefreshToken | None:
    if not _REFRESH_RE.match(token):
        return None
    digest = token_digest(token)
    query = select(RefreshToken).where(RefreshToken.digest == digest)
    row = session.scalar(query.with_for_update() if lock else query)
    if row is None or not hmac.compare_digest(row.digest, digest):
        return None
    return row


def rotate_refresh_token(
    session: Session, *, refresh_token: str, settings: Settings, now: dt.datetime
) -> IssuedTokens | RefreshRefused:
    """Spend the token and issue a new pair; a replayed spent token revokes its family.

    Returns the refusal instead of raising so that the edge commits the revocation.
    """
    row = _find_refresh_token(session, refresh_token, lock=True)
    if row is None:
        return RefreshRefused("unknown")
    family = session.get(SessionFamily, row.family_id, with_for_update=True)
    assert family is not None
    if family.revoked_at is not None:
        return RefreshRefused("revoked")
    if row.spent_at is not None:
        revoke_family(session, family_id=family.id, reason="REUSE", now=now)
        return RefreshRefused("reused")
    if row.expires_at <= now:
        return RefreshRefused("expired")
    row.spent_at = now
    return _issue_pair(session, family=family, settings=settings, now=now)


def family_of_refresh_token(session: Session, *, refresh_token: str) -> str | None:
    """The family id a refresh token (spent or not) belongs to, if it is known."""
    row = _find_refresh_token(session, refresh_token, lock=False)
    return row.family_id if row is not None else None


def revoke_family(session: Session, *, family_id: str, reason: str, now: dt.datetime) -> None:
    """End a session family: all its access and refresh tokens are refused from now on."""
    family = session.get(SessionFamily, family_id)
    if family is not None and family.revoked_at is None:
        family.revoked_at = now
        family.revoked_reason = reason
        session.flush()


# --- login throttling (decision 0220) ---------------------------------------------------

_HALF_DIGEST = 31  # a pair subject is "p:" + 31 hex of the email's digest + 31 of the address's


def throttle_address(client_ip: str | None) -> str:
    """The address a throttle counts: IPv4 as is, IPv6 by its /64 (one site's usual share)."""
    if not client_ip:
        return "unknown"
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return client_ip
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _subject_digest(
    kind: str, value: str, settings: Settings, purpose: str = "login-throttle"
) -> str:
    key = settings.derived_key(purpose)
    return hmac.new(key, f"{kind}:{value}".encode(), "sha256").hexdigest()


def login_subjects(*, email: str, client_ip: str | None, settings: Settings) -> LoginSubjects:
    """The throttle subjects of a login: the email, the client address, and the two together."""
    email_digest = _subject_digest("email", normalize_email(email), settings)
    address_digest = _subject_digest("address", throttle_address(client_ip), settings)
    return LoginSubjects(
        email="e:" + email_digest[:62],
        address="a:" + address_digest[:62],
        pair="p:" + email_digest[:_HALF_DIGEST] + address_digest[:_HALF_DIGEST],
    )


def _nth_newest_failure(
    session: Session, *, subject: str, n: int, since: dt.datetime
) -> dt.datetime | None:
    """When the subject's n-th newest failure after `since` happened, if it has n of them."""
    query = (
        select(LoginAttempt.attempted_at)
        .where(LoginAttempt.subject == subject, LoginAttempt.attempted_at > since)
        .order_by(LoginAttempt.attempted_at.desc())
        .offset(n - 1)
        .limit(1)
    )
    return session.scalar(query)


def _seconds_until(moment: dt.datetime, now: dt.datetime) -> int:
    return max(0, math.ceil((moment - now).total_seconds()))


def _window_wait(
    session: Session, *, subject: str, limit: int, settings: Settings, now: dt.datetime
) -> int:
    """Seconds until the subject's limit-th newest failure leaves the window (0: not limited)."""
    window = dt.timedelta(seconds=settings.login_window_seconds)
    boundary = _nth_newest_failure(session, subject=subject, n=limit, since=now - window)
    return 0 if boundary is None else max(1, _seconds_until(boundary + window, now))


def _email_delay(
    session: Session, *, subjects: LoginSubjects, settings: Settings, now: dt.datetime
) -> int:
    """The per-email bound: once an email has many failures, an address that has failed
    itself waits until the email's newest failure is `login_email_delay_seconds` old.
    An address with no failures is never delayed, so the owner's right password gets in."""
    since = now - dt.timedelta(seconds=settings.login_window_seconds)
    if _nth_newest_failure(session, subject=subjects.address, n=1, since=since) is None:
        return 0
    threshold = settings.login_email_attempts_per_window
    if _nth_newest_failure(session, subject=subjects.email, n=threshold, since=since) is None:
        return 0
    newest = _nth_newest_failure(session, subject=subjects.email, n=1, since=since)
    assert newest is not None
    return _seconds_until(newest + dt.timedelta(seconds=settings.login_email_delay_seconds), now)


def check_login_allowed(
    session: Session, *, subjects: LoginSubjects, settings: Settings, now: dt.datetime
) -> None:
    """Raise LoginThrottled, with the seconds to wait, when this login may not be tried now."""
    retry_after = max(
        _window_wait(
            session,
            subject=subjects.pair,
            limit=settings.login_attempts_per_window,
            settings=settings,
            now=now,
        ),
        _window_wait(
            session,
            subject=subjects.address,
            limit=settings.login_address_attempts_per_window,
            settings=settings,
            now=now,
        ),
        _email_delay(session, subjects=subjects, settings=settings, now=now),
    )
    if retry_after:
        raise LoginThrottled(
            f"Too many failed logins; try again in {retry_after} seconds.",
            retry_after=retry_after,
            retryAfter=retry_after,
        )


def record_login_failure(
    session: Session, *, subjects: LoginSubjects, settings: Settings, now: dt.datetime
) -> list[str]:
    """Count one failed login against each subject and forget failures outside the window;
    the ids of the rows that count it."""
    horizon = now - dt.timedelta(seconds=settings.login_window_seconds)
    # The table only ever holds one window of failures, so this sweep stays small.
    session.execute(delete(LoginAttempt).where(LoginAttempt.attempted_at <= horizon))
    ids = []
    for subject in (subjects.email, subjects.address, subjects.pair):
        ids.append(new_id("login"))
        session.add(LoginAttempt(id=ids[-1], subject=subject, attempted_at=now))
    session.flush()
    return ids


LOGIN_LOCK_CLASS = int.from_bytes(b"LGN", "big")
"""The first key of the PostgreSQL advisory locks (the two-int form, a key space of its own)
that serialise the attempts of one throttle subject (`lock_subjects`)."""


def lock_subjects(session: Session, subjects: Sequence[str], lock_class: int) -> None:
    """Serialise, until the transaction ends, the transactions that count against `subjects`.

    PostgreSQL: one transaction-scoped advisory lock per subject, taken in one order (no
    deadlock); under READ COMMITTED the count read after it sees every attempt committed
    before. SQLite: a write transaction has taken the database's write lock at BEGIN
    IMMEDIATE already, so the check and the insert after it are one step."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for subject in sorted(set(subjects)):
        digest = hashlib.sha256(subject.encode()).digest()
        key = int.from_bytes(digest[:4], "big", signed=True)
        session.execute(select(func.pg_advisory_xact_lock(lock_class, key)))


def count_login_attempt(
    session: Session, *, subjects: LoginSubjects, settings: Settings, now: dt.datetime
) -> list[str]:
    """Count a login attempt before its password is verified (decision 0526): under the
    subjects' locks, raise LoginThrottled when it may not be tried now, else record it as a
    failure at once (its ids, to forget if the password proves right). Concurrent attempts
    are counted one after another, so no more pass than the limits allow; an attempt whose
    process dies before the verdict stays counted."""
    lock_subjects(session, (subjects.email, subjects.address, subjects.pair), LOGIN_LOCK_CLASS)
    check_login_allowed(session, subjects=subjects, settings=settings, now=now)
    return record_login_failure(session, subjects=subjects, settings=settings, now=now)


def forget_login_attempt(session: Session, *, attempt_ids: Sequence[str]) -> None:
    """Forget an attempt `count_login_attempt` counted, once its password proved right."""
    session.execute(delete(LoginAttempt).where(LoginAttempt.id.in_(list(attempt_ids))))


def clear_login_failures(session: Session, *, subject: str) -> None:
    session.execute(delete(LoginAttempt).where(LoginAttempt.subject == subject))


def unlock_login(session: Session, *, email: str, settings: Settings) -> int:
    """Lift an account's throttles: forget its email's failures and those of its pairs.

    Returns how many recorded failures were forgotten; raises AccountNotFound.
    """
    account = get_account_by_email(session, email=email)
    subjects = login_subjects(email=account.email, client_ip=None, settings=settings)
    pair_prefix = subjects.pair[: 2 + _HALF_DIGEST]
    result = session.execute(
        delete(LoginAttempt)
        .where(
            or_(
                LoginAttempt.subject == subjects.email,
                LoginAttempt.subject.startswith(pair_prefix, autoescape=True),
            )
        )
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


# --- sign-up throttle and daily grant cap (decisions 0527, 0528) ------------------------

SIGNUP_WINDOW = dt.timedelta(hours=1)
SIGNUP_LOCK_CLASS = int.from_bytes(b"SGN", "big")
"""The first key of the advisory lock that serialises sign-ups on PostgreSQL (`lock_subjects`)."""


def signup_subject(*, client_ip: str | None, settings: Settings) -> str:
    """What the sign-up throttle counts: the client address (IPv6 by its /64), as a keyed
    digest, never readable."""
    digest = _subject_digest("address", throttle_address(client_ip), settings, "signup-throttle")
    return "a:" + digest[:62]


def check_signup_allowed(
    session: Session, *, subject: str, settings: Settings, now: dt.datetime
) -> None:
    """Raise SignupThrottled, with the seconds to wait, when the address has made
    `signup_per_address_per_hour` accounts in the last hour."""
    limit = settings.signup_per_address_per_hour
    boundary = session.scalar(
        select(Signup.created_at)
        .where(Signup.subject == subject, Signup.created_at > now - SIGNUP_WINDOW)
        .order_by(Signup.created_at.desc())
        .offset(limit - 1)
        .limit(1)
    )
    if boundary is not None:
        retry_after = max(1, _seconds_until(boundary + SIGNUP_WINDOW, now))
        raise SignupThrottled(
            f"Too many accounts were made from this address; try again in {retry_after} seconds.",
            retry_after=retry_after,
            retryAfter=retry_after,
        )


def _utc_day_start(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def start_signup(session: Session, *, subject: str, settings: Settings, now: dt.datetime) -> int:
    """In the sign-up's own write transaction, before its account is made: serialise it with
    every other sign-up (PostgreSQL: an advisory lock; SQLite: BEGIN IMMEDIATE has), check the
    address's throttle, and answer the points this account is granted: the sign-up grant
    while the grants of the UTC day stay within `signup_daily_cap` with it, else 0 (a grant
    is whole or nothing)."""
    lock_subjects(session, ("sign-ups",), SIGNUP_LOCK_CLASS)
    check_signup_allowed(session, subject=subject, settings=settings, now=now)
    grant = settings.signup_points
    if grant == 0:
        return 0
    granted = session.scalar(
        select(func.coalesce(func.sum(Signup.points), 0)).where(
            Signup.created_at >= _utc_day_start(now)
        )
    )
    return grant if int(granted or 0) + grant <= settings.signup_daily_cap else 0


def record_signup(
    session: Session, *, subject: str, account_id: str, points: int, now: dt.datetime
) -> None:
    """Count the account made (and its grant) against the address and the day; forget the
    sign-ups that neither the throttle's hour nor the day's cap still counts."""
    horizon = min(now - SIGNUP_WINDOW, _utc_day_start(now))
    session.execute(delete(Signup).where(Signup.created_at < horizon))
    session.add(
        Signup(
            id=new_id("signup"),
            subject=subject,
            account_id=account_id,
            points=points,
            created_at=now,
        )
    )
    session.flush()
