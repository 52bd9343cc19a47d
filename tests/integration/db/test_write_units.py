"""`AsyncDatabase.write(plan)` (decision 0564): the database picks the unit of a write from its
plan, alone when its first operation is a `Run` marked `last`, else a transaction; and it makes
and runs the plan again after a deadlock, not after any other error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import literal, select
from sqlalchemy.exc import OperationalError

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import utcnow
from mercato.db.aio import observing
from mercato.db.plans import Plan, Rows, Run
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger


def _reserve(account_id: str, reference: str, *, last: bool) -> Callable[[], Plan[Any]]:
    def plan() -> Plan[Any]:
        params = {
            "reservation_id": f"res_{reference}",
            "account_id": account_id,
            "amount": 1,
            "reference": reference,
            "now": utcnow(),
        }
        return (yield Run(ledger._RESERVE, params, last=last))

    return plan


def _units(runtime: Runtime, plan: Callable[[], Plan[Any]]) -> tuple[Any, list[str]]:
    seen: list[str] = []

    def listen(kind: str, detail: str) -> None:
        if kind == "unit":
            seen.append(detail)

    async def scenario() -> Any:
        with observing(runtime.adb, listen):
            return await runtime.adb.write(plan)

    return run_on_fresh_loop(scenario()), seen


def _funded(runtime: Runtime) -> str:
    account_id = make_account(runtime.db, "writer@example.com")
    with runtime.db.transaction() as session:
        ledger.grant(session, account_id=account_id, amount=10, now=utcnow())
    return account_id


def test_a_plan_of_one_last_program_runs_alone_any_other_in_a_transaction(
    runtime: Runtime,
) -> None:
    account_id = _funded(runtime)
    done, units = _units(runtime, _reserve(account_id, "w-alone", last=True))
    assert done is not None and units == ["statement"]
    done, units = _units(runtime, _reserve(account_id, "w-tx", last=False))
    assert done is not None and units == ["transaction"]
    with runtime.db.read() as session:
        assert ledger.available_points(session, account_id=account_id) == 8


class _Deadlock(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(("sqlstate", "attempts"), [("40P01", 2), ("40001", 2), ("23505", 1)])
def test_a_deadlocked_plan_is_made_and_run_again(
    runtime: Runtime, sqlstate: str, attempts: int
) -> None:
    made: list[int] = []

    def plan() -> Plan[int]:
        made.append(1)
        rows = yield Rows(select(literal(7)))
        if len(made) == 1:
            raise OperationalError("SELECT 7", None, _Deadlock(sqlstate))
        return int(rows[0][0])

    if attempts == 1:
        with pytest.raises(OperationalError):
            _units(runtime, plan)
    else:
        assert _units(runtime, plan) == (7, ["transaction", "transaction"])
    assert len(made) == attempts
