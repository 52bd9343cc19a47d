"""Builders for accounts, API keys and sessions, for any domain's tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from mercato.accounts import service
from mercato.core.clock import utcnow
from mercato.db.uow import Database
from mercato.settings import Settings

DEFAULT_PASSWORD = "correct horse battery staple"
# Argon2id over 64 KiB instead of 64 MiB (decision 0310): a hash or a login costs about a
# millisecond instead of a quarter second of CPU. Every test settings object and test process
# environment built here uses it; hashes made at the full cost still verify (and get re-hashed).
PASSWORD_HASH_MEMORY_KIB = 64
HASHING = Settings(env="dev", password_hash_memory_kib=PASSWORD_HASH_MEMORY_KIB)


def make_account(
    db: Database,
    email: str = "caller@example.com",
    *,
    password: str | None = DEFAULT_PASSWORD,
    is_staff: bool = False,
    settings: Settings = HASHING,
) -> str:
    """Create an account and return its id (its password hashed at the test cost)."""
    with db.transaction() as session:
        account = service.create_account(
            session,
            email=email,
            password=password,
            is_staff=is_staff,
            now=utcnow(),
            settings=settings,
        )
        return account.id


def make_api_key(db: Database, account_id: str, *, name: str = "test") -> tuple[str, str]:
    """Create an API key; return (plaintext, key id)."""
    with db.transaction() as session:
        created = service.create_api_key(session, account_id=account_id, name=name, now=utcnow())
    return created.api_key, created.key_id


def login(
    client: TestClient, email: str = "caller@example.com", password: str = DEFAULT_PASSWORD
) -> dict[str, Any]:
    """Log in through the API and return the token pair document."""
    response = client.post("/v1/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    pair: dict[str, Any] = response.json()
    return pair


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
