"""`mercato admin stuck-invocations` and `resolve-invocation` (DESIGN.md §3, §10)."""

from __future__ import annotations

import argparse
from typing import Any

from mercato.cli.commands_core import runtime_from_env
from mercato.cli.output import BadArgument, emit
from mercato.invocations import service as invocations
from mercato.invocations.errors import InvalidResolution, InvocationNotFound
from mercato.invocations.schemas import Decision

OPERATOR = "operator:cli"


def register(_top: Any, admin: Any) -> None:
    stuck = admin.add_parser(
        "stuck-invocations", help="list pending calls whose outcome stayed unknown"
    )
    stuck.add_argument("--json", action="store_true")
    stuck.set_defaults(handler=cmd_stuck)

    resolve = admin.add_parser(
        "resolve-invocation", help="settle or release a pending call, once, with a reason"
    )
    resolve.add_argument("invocation_id", metavar="ID")
    choice = resolve.add_mutually_exclusive_group(required=True)
    choice.add_argument(
        "--succeeded", dest="decision", action="store_const", const=Decision.SUCCEEDED
    )
    choice.add_argument("--failed", dest="decision", action="store_const", const=Decision.FAILED)
    resolve.add_argument("--reason", required=True)
    resolve.add_argument("--json", action="store_true")
    resolve.set_defaults(handler=cmd_resolve)


def cmd_stuck(args: argparse.Namespace) -> int:
    """Print the stuck calls, oldest first."""
    runtime = runtime_from_env()
    try:
        with runtime.db.read() as session:
            items = invocations.list_stuck(session)
    finally:
        runtime.db.dispose()
    lines = [
        f"{c.invocation_id} {c.service_code} {c.version} accepted "
        f"{c.to_json()['acceptedAt']} after {c.attempts} reconciliations"
        for c in items
    ]
    emit(
        {"items": [c.to_json() for c in items]},
        as_json=args.json,
        text="\n".join(lines) if lines else "no stuck invocations",
    )
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    """Settle or release a pending call; a second resolution changes nothing and exits 1."""
    try:
        invocations.check_reason(args.reason)
    except InvalidResolution as error:
        raise BadArgument("--reason", error.message) from None
    runtime = runtime_from_env()
    try:
        with runtime.db.transaction() as session:
            view = invocations.resolve(
                session,
                invocation_id=args.invocation_id,
                decision=args.decision,
                reason=args.reason,
                actor=OPERATOR,
                now=runtime.clock.now(),
            )
    except InvocationNotFound:
        raise BadArgument("ID", f"there is no invocation {args.invocation_id!r}") from None
    finally:
        runtime.db.dispose()
    emit(
        {"invocationId": view.invocation_id, "settlement": view.settlement},
        as_json=args.json,
        text=f"invocation {view.invocation_id} resolved as {args.decision.value}: "
        f"{view.settlement}",
    )
    return 0
