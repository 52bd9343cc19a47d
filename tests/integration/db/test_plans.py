"""A plan is written once and gives the same answers on a sync session and an async connection:
its rows, a money program's outputs, and a refusal thrown back into it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import utcnow
from mercato.db import guarded
from mercato.db.plans import Plan, Rows, Run, first, query
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger
from mercato.ledger.models import LedgerAccount

_AVAILABLE = select(LedgerAccount.balance).where(
    LedgerAccount.owner == bindparam("owner"), LedgerAccount.kind == "available"
)


@query
def reserve_or_refuse(*, account_id: str, amount: int, reference: str) -> Plan[dict[str, Any]]:
    """Reserve, then read the balance back; a refusal becomes an answer, not an error."""
    params = {
        "reservation_id": f"res_{reference}",
        "account_id": account_id,
        "amount": amount,
        "reference": reference,
        "now": utcnow(),
    }
    try:
        yield Run(ledger._RESERVE, params)
    except guarded.Refused as refused:
        return {"refused": refused.code, "detail": refused.detail}
    row = first((yield Rows(_AVAILABLE, {"owner": account_id})))
    assert row is not None
    return {"available": int(row[0])}


def _funded(runtime: Runtime, email: str, points: int) -> str:
    account_id = make_account(runtime.db, email)
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account_id, amount=points, now=utcnow(), memo="t")
    return account_id


def test_sync_and_async_sides_agree(runtime: Runtime) -> None:
    sync_account, async_account = (
        _funded(runtime, "sync@example.com", 10),
        _funded(runtime, "async@example.com", 10),
    )

    def sync_side(amount: int, reference: str) -> dict[str, Any]:
        with runtime.db.transaction() as session:
            return reserve_or_refuse(
                session, account_id=sync_account, amount=amount, reference=reference
            )

    async def async_side(amount: int, reference: str) -> dict[str, Any]:
        async with runtime.adb.transaction() as conn:
            return await reserve_or_refuse.aio(
                conn, account_id=async_account, amount=amount, reference=reference
            )

    steps = [(4, "a"), (7, "b"), (6, "c")]  # the second is short: 6 left, 7 wanted
    sync_answers = [sync_side(amount, f"s{ref}") for amount, ref in steps]
    async_answers = [run_on_fresh_loop(async_side(amount, f"x{ref}")) for amount, ref in steps]
    assert sync_answers == async_answers
    assert sync_answers[0] == {"available": 6}
    assert sync_answers[1]["refused"] == "short"
    assert sync_answers[2] == {"available": 0}
    with runtime.db.read() as session:
        for account in (sync_account, async_account):
            balances = ledger.balances(session, account_id=account)
            assert (balances.available, balances.reserved) == (0, 10)
