"""Builders for ledger tests: bare accounts and a readable view of every balance."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from mercato.accounts.models import Account
from mercato.core.clock import utcnow
from mercato.db.uow import Database
from mercato.ledger import service
from mercato.ledger.schemas import LedgerReport


def ledger_account(db: Database, label: str = "acct") -> str:
    """Insert a bare account (no password; hashing is not what these tests are about)."""
    account_id = f"acc_{label}_{uuid.uuid4().hex[:12]}"
    with db.transaction() as session:
        session.add(
            Account(
                id=account_id,
                email=f"{account_id}@example.com",
                password_hash=None,
                is_staff=False,
                created_at=utcnow(),
            )
        )
    return account_id


@dataclass(frozen=True)
class Book:
    """Every balance an example asserts, read in one transaction."""

    available: dict[str, int]
    reserved: dict[str, int]
    earnings: dict[str, int]
    revenue: int
    issuance: int


def book(db: Database, *account_ids: str) -> Book:
    with db.read() as session:
        per_account = {a: service.balances(session, account_id=a) for a in account_ids}
        platform = service.platform_balances(session)
    return Book(
        available={a: b.available for a, b in per_account.items()},
        reserved={a: b.reserved for a, b in per_account.items()},
        earnings={a: b.earnings for a, b in per_account.items()},
        revenue=platform["revenue"],
        issuance=platform["issuance"],
    )


def verified(db: Database) -> LedgerReport:
    with db.read() as session:
        return service.verify(session)
