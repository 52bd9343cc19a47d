"""A plan is written once and gives the same answers on a sync session and an async connection:
its rows, a money program's outputs, a refusal thrown back into it, and a refusal its run names
raised as that error."""

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


def _reserving(account_id: str, amount: int, reference: str) -> dict[str, Any]:
    """The inputs of ledger's reserve program."""
    return {
        "reservation_id": f"res_{reference}",
        "account_id": account_id,
        "amount": amount,
        "reference": reference,
        "now": utcnow(),
    }


@query
def reserve_or_refuse(*, account_id: str, amount: int, reference: str) -> Plan[dict[str, Any]]:
    """Reserve, then read the balance back; a refusal becomes an answer, not an error."""
    params = _reserving(account_id, amount, reference)
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


class _Short(Exception):
    """A domain's error for a short balance, as a service would name it."""


@query
def reserve_naming_its_refusal(
    *, account_id: str, amount: int, reference: str, seen: list[str]
) -> Plan[dict[str, Any] | None]:
    """Reserve, giving the run the error its refusal is: the runner raises it where it finds
    the refusal, out of the plan; the plan never sees a `guarded.Refused`."""
    params = _reserving(account_id, amount, reference)
    try:
        done: dict[str, Any] | None = yield Run(
            ledger._RESERVE, params, refusal=lambda refused: _Short(refused.code, refused.detail)
        )
    except guarded.Refused:
        seen.append("refused")
        raise
    return done


def test_a_refusal_named_with_its_run_is_raised_as_that_error_on_both_sides(
    runtime: Runtime,
) -> None:
    accounts = {
        side: _funded(runtime, f"named-{side}@example.com", 5) for side in ("sync", "async")
    }
    seen: list[str] = []
    errors: list[BaseException] = []

    def sync_side() -> None:
        with runtime.db.transaction() as session:
            reserve_naming_its_refusal(
                session, account_id=accounts["sync"], amount=6, reference="ns", seen=seen
            )

    async def async_side() -> None:
        async with runtime.adb.transaction() as conn:
            await reserve_naming_its_refusal.aio(
                conn, account_id=accounts["async"], amount=6, reference="na", seen=seen
            )

    for side in (sync_side, lambda: run_on_fresh_loop(async_side())):
        try:
            side()
        except _Short as error:
            errors.append(error)
    assert [error.args for error in errors] == [("short", ("5", "6"))] * 2
    assert seen == []  # never thrown into the plan
    with runtime.db.read() as session:
        for account in accounts.values():
            balances = ledger.balances(session, account_id=account)
            assert (balances.available, balances.reserved) == (5, 0)
