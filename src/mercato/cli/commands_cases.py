"""`mercato admin decide-dispute` and `decide-report` (DESIGN.md §10)."""

from __future__ import annotations

import click

from mercato.cases import flows
from mercato.cases.errors import CaseNotFound, InvalidCaseInput
from mercato.cases.schemas import CaseView, Decision
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.framework import command, json_option, one_of
from mercato.cli.output import argument_errors, emit

OPERATOR = "operator:cli"


def register(_top: click.Group, admin: click.Group) -> None:
    admin.add_command(cmd_decide_dispute)
    admin.add_command(cmd_decide_report)


def _summary(case: CaseView) -> str:
    line = f"case {case.case_id} is {case.state}"
    if case.state == "APPROVED":
        line += " (refund pending: it will be retried until it posts)"
    if case.hold_id is not None:
        line += f"; listing held by {case.hold_id}"
    return line


@command("decide-dispute", help="approve (and refund) or deny a dispute")
@click.argument("case_id", metavar="CASE_ID")
@click.option("--approve", is_flag=True, help="approve and refund")
@click.option("--deny", is_flag=True, help="deny")
@click.option("--reason", required=True)
@json_option()
def cmd_decide_dispute(case_id: str, approve: bool, deny: bool, reason: str, as_json: bool) -> int:
    """Decide a dispute: exactly one of --approve and --deny."""
    flags = {"--approve": Decision.APPROVE, "--deny": Decision.DENY}
    decision = one_of(flags, {"--approve": approve, "--deny": deny})
    return _decide(case_id, decision, reason, as_json=as_json)


@command("decide-report", help="uphold (unlist) or dismiss a content report")
@click.argument("case_id", metavar="CASE_ID")
@click.option("--uphold", is_flag=True, help="uphold and unlist")
@click.option("--dismiss", is_flag=True, help="dismiss")
@click.option("--reason", required=True)
@json_option()
def cmd_decide_report(case_id: str, uphold: bool, dismiss: bool, reason: str, as_json: bool) -> int:
    """Decide a content report: exactly one of --uphold and --dismiss."""
    flags = {"--uphold": Decision.UPHOLD, "--dismiss": Decision.DISMISS}
    decision = one_of(flags, {"--uphold": uphold, "--dismiss": dismiss})
    return _decide(case_id, decision, reason, as_json=as_json)


def _decide(case_id: str, decision: Decision, reason: str, *, as_json: bool) -> int:
    """Decide a case; an invalid transition is an error (exit 1) with its code on stderr."""
    runtime = runtime_from_env()
    errors = argument_errors({CaseNotFound: "CASE_ID", InvalidCaseInput: "--reason"})
    try:
        with errors:
            case = flows.decide(
                runtime,
                case_id=case_id,
                decision=decision,
                reason=reason,
                decided_by=OPERATOR,
            )
    finally:
        runtime.db.dispose()
    emit(case.to_json(for_staff=True), as_json=as_json, text=_summary(case))
    return 0
