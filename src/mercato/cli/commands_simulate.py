"""`mercato simulate`: the seeded fault simulation (docs/reliability.md)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from mercato.cli.output import emit


def register(top: Any, _admin: Any) -> None:
    from mercato.simulation.bugs import BUGS

    parser = top.add_parser(
        "simulate",
        help="run the seeded fault simulation against a fresh database",
        description=(
            "Drive the real platform against a simulated faulty provider with crashes and clock "
            "jumps, checking the ledger and idempotency invariants after every step. The same "
            "seed always gives the same run."
        ),
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL server to create a scratch database on (dropped afterwards), or a "
        "new SQLite file; default: a temporary SQLite file",
    )
    parser.add_argument("--inject-bug", choices=BUGS, default=None, help="test-only: a known bug")
    parser.add_argument("--quiesce-every", type=int, default=250)
    parser.add_argument("--trace", action="store_true", help="print the whole trace")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.quiesce_every < 1:
        raise SystemExit("--steps and --quiesce-every must be at least 1")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # one line per provider call is noise here
    try:
        return _simulate(args)
    finally:
        root.setLevel(level)


def _simulate(args: argparse.Namespace) -> int:
    from mercato.simulation.runner import reproduce_command, run_simulation, summary

    verdict = run_simulation(
        seed=args.seed,
        steps=args.steps,
        database_url=args.database_url,
        bug=args.inject_bug,
        quiesce_every=args.quiesce_every,
    )
    if args.json:
        emit(summary(verdict), as_json=True)
        return 0 if verdict.passed else 1
    if args.trace:
        print("\n".join(verdict.trace))
    stats = ", ".join(f"{k}={v}" for k, v in verdict.stats.items())
    head = (
        f"seed {verdict.seed}: {verdict.steps_run}/{verdict.steps} steps on {verdict.backend}"
        f"{' with bug ' + verdict.bug if verdict.bug else ''} in {verdict.seconds}s"
    )
    if verdict.passed:
        print(f"{head}: 0 invariant violations ({stats})")
        return 0
    first = verdict.violations[0]
    print(f"{head}: {len(verdict.violations)} invariant violation(s)")
    print(f"FAILED seed {verdict.seed} at step {first.step}: {first.invariant}: {first.detail}")
    for violation in verdict.violations[1:]:
        print(f"  also {violation.line()}")
    print("minimal trace:")
    print("\n".join(verdict.failure_trace))
    print(f"reproduce: {reproduce_command(verdict, args.database_url)}")
    return 1
