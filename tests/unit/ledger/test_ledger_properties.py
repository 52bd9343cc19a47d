"""Random sequences of ledger operations, valid and not, against a model kept in Python.

After every step: verify() finds the ledger balanced (so no negative balance, every transfer
sums to zero, circulation equals issuance) and each account's balances equal the model's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from builders.ledger import book, ledger_account, verified
from mercato.core.clock import utcnow
from mercato.db.uow import Database
from mercato.ledger import service
from mercato.ledger.errors import (
    InsufficientPoints,
    InvalidLedgerInput,
    RefundBlocked,
    ReservationAlreadyRefunded,
    ReservationAlreadyResolved,
    ReservationNotSettled,
)

ACCOUNTS = 3


@dataclass
class Held:
    id: str
    caller: int
    amount: int
    state: str = "HELD"
    provider: int = -1
    provider_amount: int = 0
    platform_amount: int = 0


class LedgerMachine(RuleBasedStateMachine):
    db: ClassVar[Database]

    def __init__(self) -> None:
        super().__init__()
        self.ids = [ledger_account(self.db, f"p{i}") for i in range(ACCOUNTS)]
        self.available = [0] * ACCOUNTS
        self.reserved = [0] * ACCOUNTS
        self.earnings = [0] * ACCOUNTS
        self.revenue = book(self.db).revenue
        self.held: list[Held] = []

    @rule(who=st.integers(0, ACCOUNTS - 1), amount=st.integers(1, 50))
    def grant(self, who: int, amount: int) -> None:
        with self.db.transaction() as session:
            service.grant(session, account_id=self.ids[who], amount=amount, now=utcnow())
        self.available[who] += amount

    @rule(who=st.integers(0, ACCOUNTS - 1), amount=st.integers(-2, 60))
    def reserve(self, who: int, amount: int) -> None:
        try:
            with self.db.transaction() as session:
                reservation = service.reserve(
                    session,
                    account_id=self.ids[who],
                    amount=amount,
                    reference=f"inv_{uuid.uuid4().hex}",
                    now=utcnow(),
                )
        except InvalidLedgerInput:
            assert amount <= 0
        except InsufficientPoints:
            assert amount > 0 and self.available[who] < amount
        else:
            assert 0 < amount <= self.available[who]
            self.available[who] -= amount
            self.reserved[who] += amount
            self.held.append(Held(reservation, who, amount))

    @precondition(lambda self: self.held)
    @rule(
        pick=st.integers(0, 10_000),
        provider=st.integers(0, ACCOUNTS - 1),
        bps=st.integers(0, 10_000),
    )
    def settle(self, pick: int, provider: int, bps: int) -> None:
        held = self.held[pick % len(self.held)]
        try:
            with self.db.transaction() as session:
                service.settle(
                    session,
                    reservation_id=held.id,
                    provider_account_id=self.ids[provider],
                    provider_share_bps=bps,
                    now=utcnow(),
                )
        except ReservationAlreadyResolved:
            assert held.state != "HELD"
        else:
            assert held.state == "HELD"
            held.state, held.provider = "SETTLED", provider
            held.provider_amount = held.amount * bps // 10_000
            held.platform_amount = held.amount - held.provider_amount
            self.reserved[held.caller] -= held.amount
            self.earnings[provider] += held.provider_amount
            self.revenue += held.platform_amount

    @precondition(lambda self: self.held)
    @rule(pick=st.integers(0, 10_000))
    def release(self, pick: int) -> None:
        held = self.held[pick % len(self.held)]
        try:
            with self.db.transaction() as session:
                service.release(session, reservation_id=held.id, now=utcnow())
        except ReservationAlreadyResolved:
            assert held.state != "HELD"
        else:
            assert held.state == "HELD"
            held.state = "RELEASED"
            self.reserved[held.caller] -= held.amount
            self.available[held.caller] += held.amount

    @precondition(lambda self: self.held)
    @rule(pick=st.integers(0, 10_000))
    def refund(self, pick: int) -> None:
        held = self.held[pick % len(self.held)]
        try:
            with self.db.transaction() as session:
                service.refund(session, reservation_id=held.id, now=utcnow())
        except ReservationAlreadyRefunded:
            assert held.state == "REFUNDED"
        except ReservationNotSettled:
            assert held.state in {"HELD", "RELEASED"}
        except RefundBlocked:
            assert held.state == "SETTLED"
            assert (
                self.earnings[held.provider] < held.provider_amount
                or self.revenue < held.platform_amount
            )
        else:
            assert held.state == "SETTLED"
            held.state = "REFUNDED"
            self.earnings[held.provider] -= held.provider_amount
            self.revenue -= held.platform_amount
            self.available[held.caller] += held.amount

    @rule(who=st.integers(0, ACCOUNTS - 1), amount=st.integers(1, 20))
    def payout(self, who: int, amount: int) -> None:
        try:
            with self.db.transaction() as session:
                service.payout(session, account_id=self.ids[who], amount=amount, now=utcnow())
        except InsufficientPoints:
            assert self.earnings[who] < amount
        else:
            self.earnings[who] -= amount

    @invariant()
    def ledger_is_balanced_and_matches_the_model(self) -> None:
        report = verified(self.db)
        assert report.balanced, report.problems
        now = book(self.db, *self.ids)
        assert [now.available[a] for a in self.ids] == self.available
        assert [now.reserved[a] for a in self.ids] == self.reserved
        assert [now.earnings[a] for a in self.ids] == self.earnings
        assert now.revenue == self.revenue


def test_random_operation_sequences_keep_the_ledger_balanced(db: Database) -> None:
    machine = type("BoundLedgerMachine", (LedgerMachine,), {"db": db})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=12,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
