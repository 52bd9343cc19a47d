"""`mercato admin decide-dispute` and `decide-report` (DESIGN.md §10)."""

from __future__ import annotations

import argparse
from typing import Any

from mercato.cases import flows
from mercato.cases.errors import CaseNotFound, InvalidCaseInput
from mercato.cases.schemas import CaseView, Decision
from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import argument_errors, emit

OPERATOR = "operator:cli"


def register(_top: Any, admin: Any) -> None:
    dispute = admin.add_parser("decide-dispute", help="approve (and refund) or deny a dispute")
    dispute.add_argument("case_id", metavar="CASE_ID")
    choice = dispute.add_mutually_exclusive_group(required=True)
    choice.add_argument("--approve", dest="decision", action="store_const", const=Decision.APPROVE)
    choice.add_argument("--deny", dest="decision", action="store_const", const=Decision.DENY)
    dispute.add_argument("--reason", required=True)
    dispute.add_argument("--json", action="store_true")
    dispute.set_defaults(handler=cmd_decide)

    report = admin.add_parser("decide-report", help="uphold (unlist) or dismiss a content report")
    report.add_argument("case_id", metavar="CASE_ID")
    choice = report.add_mutually_exclusive_group(required=True)
    choice.add_argument("--uphold", dest="decision", action="store_const", const=Decision.UPHOLD)
    choice.add_argument("--dismiss", dest="decision", action="store_const", const=Decision.DISMISS)
    report.add_argument("--reason", required=True)
    report.add_argument("--json", action="store_true")
    report.set_defaults(handler=cmd_decide)


def _summary(case: CaseView) -> str:
    line = f"case {case.case_id} is {case.state}"
    if case.state == "APPROVED":
        line += " (refund pending: it will be retried until it posts)"
    if case.hold_id is not None:
        line += f"; listing held by {case.hold_id}"
    return line


def cmd_decide(args: argparse.Namespace) -> int:
    """Decide a case; an invalid transition is an error (exit 1) with its code on stderr."""
    runtime = runtime_from_env()
    errors = argument_errors({CaseNotFound: "CASE_ID", InvalidCaseInput: "--reason"})
    try:
        with errors:
            case = flows.decide(
                runtime,
                case_id=args.case_id,
                decision=args.decision,
                reason=args.reason,
                decided_by=OPERATOR,
            )
    finally:
        runtime.db.dispose()
    emit(case.to_json(for_staff=True), as_json=args.json, text=_summary(case))
    return 0
