"""Deliberate bugs the simulation must catch (`--inject-bug NAME`); test-only, off by default.

Each is installed for one run by wrapping a platform function at run time (the production
modules carry no switch) and removed afterwards:

- `resend-after-unknown`: an unknown outcome is parked for redispatch instead of reconciliation.
- `double-settle`: settling a reservation posts its settle transfer a second time.
- `quota-on-replay`: a replay of a known key takes a quota slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI reads BUGS to build its parser; the simulation loads on demand
    from mercato.db.runtime import Runtime
    from support.simulation.world import Patcher

BUGS = ("resend-after-unknown", "double-settle", "quota-on-replay")


def inject(name: str, patcher: Patcher, runtime: Runtime) -> None:
    """Install bug `name` through `patcher` (undone with the run's other seams)."""
    if name == "resend-after-unknown":
        _resend_after_unknown(patcher)
    elif name == "double-settle":
        _double_settle(patcher)
    elif name == "quota-on-replay":
        _quota_on_replay(patcher, runtime)
    else:
        raise ValueError(f"unknown bug {name!r}; choose from {', '.join(BUGS)}")


def _resend_after_unknown(patcher: Patcher) -> None:
    from mercato.invocations import flows
    from mercato.invocations.schemas import State
    from mercato.protocol import Outcome

    conclude = flows.conclude

    async def buggy(runtime: Runtime, job: Any, owner: str, classified: Any) -> Any:
        if classified.outcome is Outcome.UNKNOWN_OUTCOME:
            reason = "bug: resend"
            return await flows._park(runtime, job, owner, State.RETRY_WAIT, job.sends, reason)
        return await conclude(runtime, job, owner, classified)

    patcher.set(flows, "conclude", buggy)


def _double_settle(patcher: Patcher) -> None:
    from mercato.db.guarded import Program, col, const, param
    from mercato.invocations import money
    from mercato.ledger import rules
    from mercato.ledger.schemas import PLATFORM, AccountKind, TransferKind

    # The settle program, with its settle transfer posted a second time after the reservation
    # moved once: the once-only guard forgotten for the second posting.
    def row(name: str) -> Any:
        return col("settle_settle", name)

    again = rules.transfer_steps(
        "again",
        kind=TransferKind.SETTLE,
        reference=row("id"),
        memo=row("reference"),
        now=param("now", rules.TIME),
        legs=[
            rules.Leg(
                row("account_id"), AccountKind.RESERVED, True, row("amount"), rules.INVARIANT
            ),
            rules.Leg(
                row("provider_account_id"),
                AccountKind.EARNINGS,
                False,
                row("provider_amount"),
                may_be_zero=True,
            ),
            rules.Leg(
                const(PLATFORM, rules.ID),
                AccountKind.REVENUE,
                False,
                row("platform_amount"),
                may_be_zero=True,
            ),
        ],
    )
    settle = money.SETTLE
    patcher.set(money, "SETTLE", Program(settle.name, (*settle.steps, *again), settle.outputs))


def _quota_on_replay(patcher: Patcher, runtime: Runtime) -> None:
    from mercato.invocations import flows
    from mercato.quotas import service as quotas

    prepare = flows.prepare_plan

    class Buggy:  # every replay is answered by `prepare_plan` (served from memory or not)
        plan = prepare.plan

        async def aio(self, conn: Any, rt: Runtime, request: Any, **kwargs: Any) -> Any:
            result = await prepare.aio(conn, rt, request, **kwargs)
            if isinstance(result, flows.InvokeResult) and result.replay:
                take(request)
            return result

    def take(request: Any) -> None:
        with runtime.db.transaction() as session:
            policy = quotas.policy_for(
                session,
                account_id=request.account_id,
                default=quotas.default_policy(runtime.settings),
            )
            now = runtime.clock.now()
            quotas.take_slot(session, account_id=request.account_id, policy=policy, now=now)

    patcher.set(flows, "prepare_plan", Buggy())
