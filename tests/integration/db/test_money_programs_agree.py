"""The ledger's money programs give the same answers and leave the same balances whether a
sync Session (`runner.run`) or the async driver (`Run` on `runtime.adb`) executes them: one
scripted sequence of reserves, settles, releases and refunds, refusals included, each its own
one-statement unit, run once per side on accounts of its own."""

from __future__ import annotations

from typing import Any

from builders.accounts import make_account
from builders.event_loops import run_on_fresh_loop
from mercato.core.clock import utcnow
from mercato.db import guarded, runner
from mercato.db.plans import Run
from mercato.db.runtime import Runtime
from mercato.ledger import service as ledger

Step = tuple[guarded.Program | None, dict[str, Any]]
"""A program and its inputs; None: fold every settled call's credit (as `ledger.refund` does
before its program runs, decision 0595)."""


def _script(caller: str, provider: str, tag: str) -> list[Step]:
    def reserve(name: str, amount: int) -> Step:
        params = {
            "reservation_id": f"res_{tag}_{name}",
            "account_id": caller,
            "amount": amount,
            "reference": f"{tag}-{name}",
            "now": utcnow(),
        }
        return ledger._RESERVE, params

    def settle(name: str, share_bps: int) -> Step:
        params = {
            "reservation_id": f"res_{tag}_{name}",
            "provider_account_id": provider,
            "share_bps": share_bps,
            "now": utcnow(),
        }
        return ledger._SETTLE, params

    def resolve(program: guarded.Program, name: str) -> Step:
        return program, {"reservation_id": f"res_{tag}_{name}", "now": utcnow()}

    return [
        reserve("a", 30),
        reserve("b", 80),  # refused: 70 available
        reserve("b", 50),
        settle("a", 7000),
        settle("a", 7000),  # refused: already settled
        resolve(ledger._RELEASE, "b"),
        resolve(ledger._RELEASE, "b"),  # refused: already released
        settle("b", 5000),  # refused: released
        (None, {}),
        resolve(ledger._REFUND, "a"),
        resolve(ledger._REFUND, "a"),  # refused: already refunded
        reserve("c", 100),
        settle("c", 3333),
        resolve(ledger._RELEASE, "missing"),  # refused: no such reservation
    ]


def _answer(run: Any) -> Any:
    try:
        outputs = run()
    except guarded.Refused as refused:
        return ("refused", refused.code, refused.detail)
    return ("done", outputs)


def test_sync_and_async_sides_run_the_money_programs_alike(runtime: Runtime) -> None:
    accounts = {
        side: (
            make_account(runtime.db, f"{side}-caller@example.com"),
            make_account(runtime.db, f"{side}-provider@example.com"),
        )
        for side in ("sync", "async")
    }
    with runtime.db.transaction() as session:
        for caller, _provider in accounts.values():
            ledger.grant(session, account_id=caller, amount=100, now=utcnow(), memo="t")
    with runtime.db.read() as session:
        platform_before = ledger.platform_balances(session)

    def fold() -> Any:
        with runtime.db.transaction() as session:
            ledger.fold(session)
        return ("folded",)

    def sync_step(program: guarded.Program | None, params: dict[str, Any]) -> Any:
        if program is None:
            return fold()

        def run() -> Any:
            with runtime.db.statement() as session:
                return runner.run(session, program, params)

        return _answer(run)

    sync_answers = [sync_step(*step) for step in _script(*accounts["sync"], "s")]
    with runtime.db.read() as session:
        platform_between = ledger.platform_balances(session)

    async def async_script() -> list[Any]:
        answers = []
        for program, params in _script(*accounts["async"], "x"):
            if program is None:
                answers.append(fold())
                continue
            try:
                async with runtime.adb.statement() as conn:
                    answers.append(("done", await conn.execute(Run(program, params))))
            except guarded.Refused as refused:
                answers.append(("refused", refused.code, refused.detail))
        return answers

    async_answers = run_on_fresh_loop(async_script())
    assert async_answers == sync_answers
    assert [answer[0] for answer in sync_answers].count("refused") == 6
    with runtime.db.read() as session:
        platform_after = ledger.platform_balances(session)
        balances = {
            side: (
                ledger.balances(session, account_id=caller),
                ledger.balances(session, account_id=provider),
            )
            for side, (caller, provider) in accounts.items()
        }
        assert ledger.verify(session).balanced
    assert balances["sync"] == balances["async"]
    moved_sync = {k: platform_between[k] - platform_before[k] for k in platform_before}
    moved_async = {k: platform_after[k] - platform_between[k] for k in platform_before}
    assert moved_sync == moved_async
    assert moved_sync["revenue"] != 0
